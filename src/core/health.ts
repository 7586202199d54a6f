/**
 * The receiver's health check: whether its store answers, and how many keys sit `in_progress` past their
 * lease. The health routes of `retrysafe/express`, `retrysafe/fastify` and `retrysafe/hono` combine it
 * with the inbox's and the outbox's checks (`checkHealth`).
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import type { IdempotencyStore } from './store.js';

/** Most stuck keys a health check counts (the count is one bounded query). */
export const STUCK_KEY_LIMIT = 1000;

/** One component's health. `healthy: false` turns a health route's answer into a 503. */
export interface ComponentHealth {
  readonly healthy: boolean;
  /** Why it is unhealthy (the error's message), when it is. */
  readonly error?: string;
  /** Component-specific figures (counts, ages in milliseconds). */
  readonly [figure: string]: unknown;
}

/**
 * What `Receiver.health` reports.
 * - `healthy`: the store answered `ping()` (a store without `ping` is tried with a `get`).
 * - `latencyMs`: the round trip of that call, in milliseconds.
 * - `expiredLeases`: `in_progress` keys past their lease, counted up to {@link STUCK_KEY_LIMIT}
 *   (`undefined` when the store cannot count them). Not a failure by itself: a retry takes such a key
 *   over; a count that stays up means clients gave up on keys whose holder crashed.
 */
export interface ReceiverHealth extends ComponentHealth {
  readonly store: string;
  readonly latencyMs: number;
  readonly expiredLeases: number | undefined;
}

/** Pings `store` and counts its expired leases; never throws (an unreachable store is reported as such). */
export async function receiverHealth(store: IdempotencyStore): Promise<ReceiverHealth> {
  const kind = store.kind ?? 'custom';
  const started = performance.now();
  try {
    if (store.ping) await store.ping();
    else await store.get('', '');
    const latencyMs = performance.now() - started;
    const expiredLeases = store.countExpiredLeases ? await store.countExpiredLeases(STUCK_KEY_LIMIT) : undefined;
    return { healthy: true, store: kind, latencyMs, expiredLeases };
  } catch (error) {
    return {
      healthy: false,
      store: kind,
      latencyMs: performance.now() - started,
      expiredLeases: undefined,
      error: error instanceof Error ? error.message : String(error),
    };
  }
}
