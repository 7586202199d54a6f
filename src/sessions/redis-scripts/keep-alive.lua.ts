/**
 * The session `keepAlive` script: validates the session, raises its low-water mark and renews its lease.
 *
 * @module
 */
import { SESSION_PRELUDE_LUA } from './prelude.lua.js';

/**
 * Lua source of `keepAlive`.
 *
 * KEYS[1] — the session hash; KEYS[2] — its saved responses; KEYS[3] — its executions in progress.
 * ARGV[1] — now (ms since the epoch); ARGV[2] — the client's low-water mark; ARGV[3] — the renewed lease
 * expiry (ms since the epoch); ARGV[4] — the TTL grace in ms.
 *
 * Returns `'ok'`, `'unknown'` or `'expired'`; saved responses at or below the mark are deleted in the same
 * step, which keeps the session's memory bounded by the requests the client has not acknowledged.
 */
export const KEEP_ALIVE_SESSION_LUA = `${SESSION_PRELUDE_LUA}
local now = tonumber(ARGV[1])
local grace = tonumber(ARGV[4])
local refused, fields = live(now, grace)
if refused then return refused end
expire_all(advance(fields, ARGV[2], ARGV[3]), now, grace)
return 'ok'
`;
