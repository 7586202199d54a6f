/**
 * The real Redis TTL set on each record key: a safety net under the clock-driven expiry.
 *
 * @module
 */

/**
 * Extra real time a record key outlives its last deadline, in milliseconds (5 minutes). Expiry decisions
 * (lease takeover, retention, reap) follow the store's injected clock, passed to every script; the real TTL
 * only makes Redis drop a record by itself once no decision can need it any more. The grace absorbs skew
 * between the clocks of the processes sharing the store, and lets a test on a fake clock advance its time
 * without Redis deleting the records under it.
 */
export const REDIS_TTL_GRACE_MS = 300_000;

/**
 * The relative TTL (`PEXPIRE`, milliseconds) for a record whose last deadline (retention end, or a lease
 * end beyond it) is `until`, both `until` and `now` in ms since the epoch on the store's clock. Relative,
 * not `PEXPIREAT`: the store's clock may be a fake one far from Redis's wall clock.
 */
export function safetyTtlMs(now: number, until: number): number {
  return Math.max(until - now, 0) + REDIS_TTL_GRACE_MS;
}
