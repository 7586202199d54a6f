/**
 * The session `release` script: deletes an execution in progress, fenced by its token.
 *
 * @module
 */

/**
 * Lua source of `release`.
 *
 * KEYS[1] — the session's executions in progress.
 * ARGV[1] — the request number; ARGV[2] — the fencing token.
 *
 * Returns 1 when deleted; 0, changing nothing, when the request is not in progress under this token.
 */
export const RELEASE_SESSION_LUA = `
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held then return 0 end
if string.sub(held, string.find(held, ':', 1, true) + 1) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`;
