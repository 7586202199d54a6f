/**
 * What the Redis stores need of a connection, for one Redis (`Redis`) and for Redis Cluster (`Cluster`)
 * alike: scripts and reads routed by key, key walks over every master, a subscriber of its own, and the
 * replica acknowledgement (`WAIT`) on the node that owns a key.
 *
 * @module
 */
import type { Cluster, Redis } from 'ioredis';

/**
 * An ioredis connection to one Redis, or an ioredis `Cluster`. On Cluster every record's keys share one hash
 * tag, so each script runs on the master that owns the slot; key walks visit every master.
 */
export type RedisConnection = Redis | Cluster;

/** Is `value` shaped like an ioredis `Redis` or `Cluster` (enough for what the stores call)? */
export function isRedisConnection(value: unknown): value is RedisConnection {
  const candidate = value as Partial<Record<'callBuffer' | 'scan' | 'duplicate' | 'subscribe' | 'pipeline', unknown>> | null;
  return (
    typeof value === 'object' &&
    candidate !== null &&
    typeof candidate.callBuffer === 'function' &&
    typeof candidate.scan === 'function' &&
    typeof candidate.duplicate === 'function' &&
    typeof candidate.subscribe === 'function' &&
    typeof candidate.pipeline === 'function'
  );
}

/** Is `connection` an ioredis `Cluster` (rather than a connection to one Redis)? */
export function isCluster(connection: RedisConnection): connection is Cluster {
  return connection.isCluster;
}

/**
 * The connections a key walk must visit: the one Redis, or every master of the cluster (SCAN is local to
 * the node it runs on; replicas hold copies, so masters alone see each key once).
 */
function masters(connection: RedisConnection): Redis[] {
  return isCluster(connection) ? connection.nodes('master') : [connection];
}

/**
 * Every key matching `pattern`, one SCAN step (about `count` keys) at a time, over every master in turn. A
 * key may come twice (SCAN's own guarantee); a key added or removed during the walk may or may not come.
 */
export async function* scanKeys(connection: RedisConnection, pattern: string, count: number): AsyncGenerator<string[]> {
  for (const node of masters(connection)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', count);
      cursor = next;
      yield keys;
    } while (cursor !== '0');
  }
}

/**
 * A new connection like `connection` for pub/sub: it queues its SUBSCRIBE until connected, whatever the
 * caller chose for its own connection, and connects at once rather than lazily. On Cluster, a PUBLISH
 * reaches every node, so the subscriber may listen on any of them.
 */
export function duplicateForSubscribe(connection: RedisConnection): RedisConnection {
  const options = { enableOfflineQueue: true, lazyConnect: false };
  return isCluster(connection) ? connection.duplicate([], options) : connection.duplicate(options);
}

/**
 * Sends `WAIT replicas timeoutMs` to the node that owns `key` and returns how many replicas acknowledged
 * every write that node took before it. A pipeline is routed by its keyed commands, so the `EXISTS` pins
 * the keyless `WAIT` to the key's master on Cluster (on one Redis it is simply the same connection).
 *
 * @throws the driver's error when Redis fails
 */
export async function waitForReplicas(connection: RedisConnection, key: string, replicas: number, timeoutMs: number): Promise<number> {
  const replies = await connection.pipeline().exists(key).call('WAIT', replicas, timeoutMs).exec();
  const [error, acknowledged] = replies?.[1] ?? [new Error('retrysafe: no reply to WAIT'), undefined];
  if (error) throw error;
  return Number(acknowledged);
}
