/**
 * The listen script: marks a record in progress as waited for, so its completion publishes.
 *
 * @module
 */
import { READ_RECORD_LUA, repackFixedLua, unpackHeadLua } from './record.lua.js';

/**
 * Lua source of the waiter's mark (`waitFor`, once its SUBSCRIBE is acknowledged).
 *
 * KEYS[1] — the record's key; also the pub/sub channel `waitFor` listens on.
 *
 * Returns the record value as it stands after the script (`layout.ts`), or `false` when there is none. A
 * record in progress gets the completion field 1, its real TTL kept (`PTTL`, then `SET … PX`): the complete script publishes only
 * for a record so marked (a completion that nobody waits for costs Redis no `PUBLISH`); takeovers,
 * renewals and recovery points keep the mark. A completed record is returned unchanged.
 */
export const LISTEN_LUA = `
${READ_RECORD_LUA}
if not v then return false end
${unpackHeadLua('completed')}
if state ~= 1 or completed ~= 0 then return v end
v = ${repackFixedLua({ state: '1', lease: 'lease', created: 'created', expires: 'expires', completed: '1' }, 'v')}
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('SET', KEYS[1], v, 'PX', ttl) else redis.call('SET', KEYS[1], v) end
return v
`;
