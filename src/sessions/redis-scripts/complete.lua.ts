/**
 * The session `complete` script: saves a response, fenced by the execution's token.
 *
 * @module
 */

/**
 * Lua source of `complete`.
 *
 * KEYS[1] — the session hash; KEYS[2] — its saved responses; KEYS[3] — its executions in progress.
 * ARGV[1] — the request number; ARGV[2] — the fencing token; ARGV[3] — the response.
 *
 * Returns 1 when saved (the responses hash takes the session's remaining TTL); 0, changing nothing, when the
 * request is not in progress under this token (taken over, released, dropped by the low-water mark or by
 * expiry).
 */
export const COMPLETE_SESSION_LUA = `
local held = redis.call('HGET', KEYS[3], ARGV[1])
if not held then return 0 end
if string.sub(held, string.find(held, ':', 1, true) + 1) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
`;
