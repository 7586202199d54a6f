/**
 * The real Redis TTL set on each record key: a safety net under the expiry the scripts decide.
 *
 * @module
 */

/**
 * Extra real time a record key outlives its last deadline, in milliseconds (5 minutes). Expiry decisions
 * (lease takeover, retention, reap) are made by the scripts on Redis's clock (or an injected one); the
 * real TTL, set relative to the script's "now", only makes Redis drop a record by itself once no decision
 * can need it any more. The grace lets a test on a fake clock advance its time without Redis deleting the
 * records under it.
 */
export const REDIS_TTL_GRACE_MS = 300_000;

/**
 * The real Redis TTL, in milliseconds, of a record key whose last deadline is `untilMs` milliseconds from
 * the script's "now": that time plus {@link REDIS_TTL_GRACE_MS}. The claim passes the longer of its lease
 * and retention, `complete` its retention. (The checkpoint script works it out itself, from the deadline
 * it reads in the record.)
 */
export function recordTtlMs(untilMs: number): number {
  return untilMs + REDIS_TTL_GRACE_MS;
}
