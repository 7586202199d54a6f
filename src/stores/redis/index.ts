/**
 * `retrysafe/redis`: the Redis idempotency store, on the `ioredis` driver or on node-redis (`redis`). What it
 * guarantees and what it cannot (Redis does not commit together with your business database) is in docs/redis.md.
 *
 * @module
 */
export type { RedisConnection } from './connection.js';
export { RedisEvictionPolicyError } from './eviction.js';
export { createRedisStore, type RedisStoreOptions } from './factory.js';
export { REDIS_TTL_GRACE_MS } from './ttl.js';
export { openRedisStore } from './url.js';
