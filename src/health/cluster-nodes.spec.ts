import { clusterMasters } from './cluster-nodes';

describe('clusterMasters', () => {
  it('should list every master of a CLUSTER NODES reply, failed ones included, and no replica', () => {
    const reply = [
      '07c37dfe 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460',
      'e7d1eecc 127.0.0.1:7002@17002,node-b.example master,fail - 1 1 2 disconnected 5461-10922',
      '67ed2db8 127.0.0.1:7003@17003 master - 0 2 3 connected 10923-16383',
      '824fe116 127.0.0.1:7004@17004 slave 07c37dfe 0 3 1 connected',
      '',
    ].join('\n');
    expect(clusterMasters(reply)).toEqual(['127.0.0.1:7001', '127.0.0.1:7002', '127.0.0.1:7003']);
  });
});
