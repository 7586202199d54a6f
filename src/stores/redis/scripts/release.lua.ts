/**
 * The release script: deletes the caller's `in_progress` record, fenced by the lease token.
 *
 * @module
 */
import { READ_RECORD_LUA, unpackHeadLua } from './record.lua.js';

/**
 * Lua source of `release`.
 *
 * KEYS[1] — the record's key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — the caller's fencing token.
 *
 * Returns 1 when deleted (and publishes `released` on KEYS[1]); 0, changing nothing, when the record is
 * absent, completed, or held under another token.
 */
export const RELEASE_LUA = `
${READ_RECORD_LUA}
if not v then return 0 end
${unpackHeadLua('token')}
if state ~= 1 or token ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], 'released')
return 1
`;
