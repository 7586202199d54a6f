/**
 * The complete script: saves the response, fenced by the lease token.
 *
 * @module
 */
import { nowLua } from './now.lua.js';

/**
 * Lua source of `complete`.
 *
 * KEYS[1] — the record's hash key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — now (the completion time) in ms since the epoch from the store's injected clock, or empty for
 *   Redis's `TIME` (see `now.lua.ts`).
 * ARGV[3] — the completed record's retention, in ms from now.
 * ARGV[4] — the real Redis TTL to set on the hash key, in ms: `recordTtlMs` (`ttl.ts`) of the retention,
 *   computed by the caller, so the script passes it on as given.
 * ARGV[5] — response status; ARGV[6] — response headers as a JSON object; ARGV[7] — body bytes.
 *
 * Returns 1 when saved (and publishes `completed` on KEYS[1]); 0, changing nothing, when the record is
 * absent, already completed, or held under another token.
 *
 * One exception, changing nothing either: a record already completed under ARGV[1] with this very status,
 * headers and body answers 1. That is this completion run a second time — ioredis resends a command whose
 * connection dropped before its reply arrived (`autoResendUnfulfilledCommands`, on by default) — and
 * answering 0 would tell the holder its lease was lost although its response was saved. A second, different
 * completion by the same holder is still refused.
 */
export const COMPLETE_LUA = `
local held = redis.call('HMGET', KEYS[1], 'state', 'token')
if held[2] ~= ARGV[1] then return 0 end
if held[1] == 'completed' then
  local saved = redis.call('HMGET', KEYS[1], 'status', 'headers', 'body')
  if saved[1] == ARGV[5] and saved[2] == ARGV[6] and saved[3] == ARGV[7] then return 1 end
  return 0
end
if held[1] ~= 'in_progress' then return 0 end
${nowLua(2)}
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed', fmt(now), 'expires', fmt(now + tonumber(ARGV[3])),
  'status', ARGV[5], 'headers', ARGV[6], 'body', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', KEYS[1], 'completed')
return 1
`;
