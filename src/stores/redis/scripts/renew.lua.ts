/**
 * The renew script: the lease keep-alive, fenced by the lease token (see `IdempotencyStore.renew`).
 *
 * @module
 */
import { extendHeldLeaseLua } from './held-lease.lua.js';

/**
 * Lua source of `renew`.
 *
 * KEYS[1] — the record's key (hash-tagged, so it maps to one Cluster slot: see `keys.ts`).
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — now in ms since the epoch from the store's injected clock, or empty for Redis's `TIME` (see
 *   `now.lua.ts`).
 * ARGV[3] — the renewed lease, in ms from now (positive).
 * ARGV[4] — the grace the record key's real TTL keeps past its last deadline, in ms (see `ttl.ts`).
 *
 * Returns the new lease end (integer text, ms since the epoch) when renewed: the lease end is set, the
 * recovery point and token are kept, the retention end is stretched to the new lease end when that is
 * later (never shortened), and the real TTL follows the retention end. Returns 0, changing nothing, when
 * the record is absent, completed, or held under another token.
 */
export const RENEW_LUA = extendHeldLeaseLua({ now: 2, lease: 3, grace: 4, rp: 'rp' });
