// What a person is told when an embedded server does not start: the cause and what to do.
import { explainExit } from './embedded-postgres';
import { explainRedisExit, RedisServerMissingError } from './embedded-redis';
import { PortTakenError } from './postgres-placement';

describe('embedded server start failures', () => {
  const place = { dataDir: '/root/app/.data/postgres' };

  it('should name the port and what to do when PostgreSQL cannot bind it', () => {
    const out =
      'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use\nFATAL:  could not create any TCP/IP sockets\n';
    const err = explainExit(place, 5544, 1, out);
    // A PortTakenError: where the service chose the port itself, it starts PostgreSQL on another.
    expect(err).toBeInstanceOf(PortTakenError);
    expect(err.message).toBe(
      'port 5544 is in use, so the embedded PostgreSQL cannot listen there: free that port, or set DATABASE_URL to a PostgreSQL of your own',
    );
  });

  it('should name the other PostgreSQL running on the same data folder', () => {
    const out =
      'FATAL:  lock file "postmaster.pid" already exists\nHINT:  Is another postmaster (PID 4242) running in data directory "/root/app/.data/postgres"?\n';
    expect(explainExit(place, 5544, 1, out).message).toMatch(
      /^another PostgreSQL \(pid 4242\) is running on the data folder \/root\/app\/.data\/postgres: stop it \(kill 4242\)/,
    );
  });

  it('should say that a data folder of another PostgreSQL version must be moved away', () => {
    const out =
      'FATAL:  database files are incompatible with server\nDETAIL:  The data directory was initialized by PostgreSQL version 16, which is not compatible with this version 17.5.\n';
    const msg = explainExit(place, 5544, 1, out).message;
    expect(msg).toContain('was made by another PostgreSQL version');
    expect(msg).toContain('initialized by PostgreSQL version 16');
    expect(msg).toContain('move it away, set DATA_DIR to another folder');
  });

  it('should pass on PostgreSQL last lines when the cause is not one it knows', () => {
    const msg = explainExit(place, 5544, 1, 'one\ntwo\nthree\nfour\nFATAL:  out of shared memory\n').message;
    expect(msg).toContain('exited (code 1) before it was ready');
    expect(msg).toContain('FATAL:  out of shared memory');
    expect(msg).not.toContain('one');
  });

  it('should name the port redis-server could not listen on, and how to use another Redis', () => {
    const out =
      '# Warning: Could not create server TCP listening socket 127.0.0.1:6390: bind: Address already in use\n';
    expect(explainRedisExit(6390, 1, out)).toBeInstanceOf(PortTakenError);
    expect(explainRedisExit(6390, 1, out).message).toBe(
      'port 6390 is in use, so redis-server cannot listen there: free that port, or set REDIS_URL',
    );
  });

  it('should say how to install redis-server when it is missing', () => {
    expect(new RedisServerMissingError().message).toMatch(
      /no redis-server is on PATH: install one .*apt-get install redis-server.*REDIS_URL/,
    );
  });
});
