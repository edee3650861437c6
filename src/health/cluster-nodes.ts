// Reading a Redis Cluster's own view of its nodes (CLUSTER NODES), kept apart from the Terminus indicator.

/** The masters a cluster node lists: `host:port`, from lines `<id> <ip:port@cport[,hostname]> <flags> ...`. */
export function clusterMasters(nodesReply: string): string[] {
  return nodesReply
    .split('\n')
    .map((line) => line.trim().split(' '))
    .filter((f) => f.length > 2 && f[2].split(',').includes('master'))
    .map((f) => f[1].split('@')[0]);
}
