/**
 * The checkpoint script: records a recovery point and renews the lease, fenced by the lease token (atomic
 * phases; see `IdempotencyStore.checkpoint`).
 *
 * @module
 */
import { extendHeldLeaseLua } from './held-lease.lua.js';

/**
 * Lua source of `checkpoint`.
 *
 * KEYS[1] — the record's key.
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — the recovery point (opaque text).
 * ARGV[3] — now in ms since the epoch from the store's injected clock, or empty for Redis's `TIME` (see
 *   `now.lua.ts`).
 * ARGV[4] — the renewed lease, in ms from now (0 ends the lease at once).
 * ARGV[5] — the grace the record key's real TTL keeps past its last deadline, in ms (see `ttl.ts`).
 *
 * Returns the new lease end (integer text, ms since the epoch) when recorded: the recovery point and the
 * lease end are set, the retention end is stretched to the new lease end when that is later (never
 * shortened), and the real TTL follows the retention end. Returns 0, changing nothing, when the record is absent, completed, or held under
 * another token.
 */
export const CHECKPOINT_LUA = extendHeldLeaseLua({ now: 3, lease: 4, grace: 5, rp: 'ARGV[2]' });
