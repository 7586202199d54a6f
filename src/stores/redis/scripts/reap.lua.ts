/**
 * The reap script: deletes one record if its retention has expired and no live lease holds it.
 *
 * @module
 */
import { nowLua } from './now.lua.js';

/**
 * Lua source of the per-record reap step (`reap` finds candidates with SCAN, then runs this on each).
 *
 * KEYS[1] — the record's hash key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — now in ms since the epoch from the store's injected clock, or empty for Redis's `TIME` (see
 *   `now.lua.ts`).
 *
 * Returns 1 when deleted (and publishes `reaped` on KEYS[1]); 0 when the record is absent, still retained,
 * or `in_progress` under a live lease.
 */
export const REAP_LUA = `
${nowLua(1)}
local record = redis.call('HMGET', KEYS[1], 'state', 'lease', 'expires')
if not record[3] or tonumber(record[3]) > now then return 0 end
if record[1] == 'in_progress' and tonumber(record[2]) > now then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], 'reaped')
return 1
`;
