/**
 * The complete script: saves the response, fenced by the lease token.
 *
 * @module
 */
import { nowLua } from './now.lua.js';
import { READ_RECORD_LUA, repackFixedLua, unpackHeadLua } from './record.lua.js';

/**
 * Lua source of `complete`.
 *
 * KEYS[1] — the record's key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — now (the completion time) in ms since the epoch from the store's injected clock, or empty for
 *   Redis's `TIME` (see `now.lua.ts`).
 * ARGV[3] — the completed record's retention, in ms from now.
 * ARGV[4] — the real Redis TTL to set on the record key, in ms: `recordTtlMs` (`ttl.ts`) of the retention,
 *   computed by the caller, so the script passes it on as given.
 * ARGV[5] — the response packed as a completed record's tail (status, headers as a JSON object, body:
 *   `encodeTail` in `layout.ts`), appended to the head as it is: the script packs no response field.
 *
 * Returns 1 when saved (and publishes `completed` on KEYS[1] when a `waitFor` marked the record: see
 * `scripts/listen.lua.ts`; an unmarked record has no listener to wake); 0, changing nothing, when the record is
 * absent, completed under another token, or held under another token.
 *
 * A record already completed under ARGV[1] answers 1 and changes nothing: that is this completion run a
 * second time — the engine retrying a completion whose reply was lost, or ioredis resending a command whose
 * connection dropped before its reply arrived (`autoResendUnfulfilledCommands`, on by default) — and
 * answering 0 would tell the holder its lease was lost although its response was saved (the store
 * contract: `complete` is idempotent for its own token).
 */
export const COMPLETE_LUA = `
${READ_RECORD_LUA}
if not v then return 0 end
${unpackHeadLua('token')}
if token ~= ARGV[1] then return 0 end
if state == 2 then return 1 end
${nowLua(2)}
local record = ${repackFixedLua(
  { state: '2', lease: 'lease', created: 'created', expires: 'now + tonumber(ARGV[3])', completed: 'now' },
  'v',
)} .. ARGV[5]
redis.call('SET', KEYS[1], record, 'PX', ARGV[4])
-- Hot path: docs/hot-path.md#redis-completion-notice
if completed ~= 0 then redis.call('PUBLISH', KEYS[1], 'completed') end
return 1
`;
