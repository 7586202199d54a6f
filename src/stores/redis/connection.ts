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

/** Is `value` shaped like a node-redis client to one Redis (`createClient()`; not a Cluster, pool or Sentinel)? */
function isNodeRedisClient(value: unknown): value is NodeRedisClient {
  const candidate = value as Partial<Record<'sendCommand' | 'duplicate' | 'subscribe' | 'isReady' | 'isOpen' | 'createPool', unknown>> | null;
  return (
    typeof value === 'object' &&
    candidate !== null &&
    typeof candidate.sendCommand === 'function' &&
    typeof candidate.duplicate === 'function' &&
    typeof candidate.subscribe === 'function' &&
    typeof candidate.isReady === 'boolean' &&
    typeof candidate.isOpen === 'boolean' &&
    typeof candidate.createPool === 'function'
  );
}

/** Is `value` shaped like a node-redis Cluster (`createCluster()` of the `redis` package), which the stores do not take? */
export function isNodeRedisCluster(value: unknown): boolean {
  const candidate = value as Partial<Record<'sendCommand' | 'nodeClient' | 'masters', unknown>> | null;
  return typeof value === 'object' && candidate !== null && typeof candidate.sendCommand === 'function' && typeof candidate.nodeClient === 'function' && Array.isArray(candidate.masters);
}
