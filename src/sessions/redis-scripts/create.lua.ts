/**
 * The session `create` script: inserts a live session only when its id is free.
 *
 * @module
 */

/**
 * Lua source of `create`.
 *
 * KEYS[1] — the session hash; KEYS[2], KEYS[3] — its responses and in-progress hashes.
 * ARGV[1] — the lease expiry, ms since the epoch; ARGV[2] — the keys' real TTL in ms.
 *
 * Returns 1 when created; 0, changing nothing, when a live session or a tombstone holds the id.
 */
export const CREATE_SESSION_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'state', 'live', 'lease', ARGV[1], 'lwm', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;
