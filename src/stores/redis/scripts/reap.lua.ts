/**
 * The reap script: deletes one record if its retention has expired and no live lease holds it.
 *
 * @module
 */
import { nowLua } from './now.lua.js';
import { READ_RECORD_LUA, unpackHeadLua } from './record.lua.js';

/**
 * Lua source of the per-record reap step (`reap` finds candidates with SCAN, then runs this on each).
 *
 * KEYS[1] — the record's key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — now in ms since the epoch from the store's injected clock, or empty for Redis's `TIME` (see
 *   `now.lua.ts`).
 *
 * Returns 1 when deleted (and publishes `reaped` on KEYS[1]); 0 when the record is absent, still retained,
 * or `in_progress` under a live lease.
 */
export const REAP_LUA = `
${nowLua(1)}
${READ_RECORD_LUA}
if not v then return 0 end
${unpackHeadLua('expires')}
if expires > now then return 0 end
if state == 1 and lease > now then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], 'reaped')
return 1
`;
