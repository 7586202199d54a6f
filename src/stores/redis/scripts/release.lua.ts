/**
 * The release script: deletes the caller's `in_progress` record, fenced by the lease token.
 *
 * @module
 */

/**
 * Lua source of `release`.
 *
 * KEYS[1] — the record's hash key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — the caller's fencing token.
 *
 * Returns 1 when deleted (and publishes `released` on KEYS[1]); 0, changing nothing, when the record is
 * absent, completed, or held under another token.
 */
export const RELEASE_LUA = `
local held = redis.call('HMGET', KEYS[1], 'state', 'token')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], 'released')
return 1
`;
