/**
 * The connections the Redis stores accept: an ioredis `Redis` or `Cluster`, or a node-redis client
 * (`createClient()` of the `redis` package), told apart by their shape so that neither driver is imported.
 *
 * @module
 */
import type { Cluster, Redis } from 'ioredis';
import type { NodeRedisClient } from './node-redis-transport.js';

/**
 * An ioredis connection to one Redis, an ioredis `Cluster`, or a node-redis client to one Redis. On Cluster
 * every record's keys share one hash tag, so each script runs on the master that owns the slot; key walks
 * visit every master.
 */
export type RedisConnection = Redis | Cluster | NodeRedisClient;

/** Is `value` shaped like an ioredis `Redis` or `Cluster`, or a node-redis client to one Redis (enough for what the stores call)? */
export function isRedisConnection(value: unknown): value is RedisConnection {
  return isIoredisConnection(value) || isNodeRedisClient(value);
}

/** Is `value` shaped like an ioredis `Redis` or `Cluster`? */
export function isIoredisConnection(value: unknown): value is Redis | Cluster {
  return hasMethods(value, ['callBuffer', 'scan', 'duplicate', 'subscribe', 'pipeline']);
}

/** Is `value` shaped like a node-redis client to one Redis (`createClient()`; not a Cluster, pool or Sentinel)? */
function isNodeRedisClient(value: unknown): value is NodeRedisClient {
  return hasMethods(value, ['sendCommand', 'duplicate', 'subscribe', 'createPool']) && typeof value.isReady === 'boolean' && typeof value.isOpen === 'boolean';
}

/** Is `value` shaped like a node-redis Cluster (`createCluster()` of the `redis` package), which the stores do not take? */
export function isNodeRedisCluster(value: unknown): boolean {
  return hasMethods(value, ['sendCommand', 'nodeClient']) && Array.isArray(value.masters);
}

/** Is `value` an object with a function under each of `names`? */
function hasMethods(value: unknown, names: readonly string[]): value is Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Readonly<Record<string, unknown>>;
  return names.every((name) => typeof candidate[name] === 'function');
}
