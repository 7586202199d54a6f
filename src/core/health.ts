/**
 * The receiver's health check: whether its store answers and accepts writes, and how many keys sit
 * `in_progress` past their lease. The health routes of `retrysafe/express`, `retrysafe/fastify` and `retrysafe/hono` combine it
 * with the inbox's and the outbox's checks (`checkHealth`).
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
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
 * The scope the write probe claims its keys in. Reserved: an application must not use it (a probe key is a
 * random UUID, so it would not collide with an application's key, but the probe's records would show in
 * that scope's listings for the instant they live).
 */
export const HEALTH_PROBE_SCOPE = 'retrysafe:health-probe';

/**
 * How long, in milliseconds, one write probe's result stands: a health route polled more often answers
 * the cached result, so the store takes at most one probe claim and release per interval per receiver.
 */
export const HEALTH_PROBE_INTERVAL_MS = 5_000;

/** The probe claim's lease and retention, in milliseconds: short, so a probe whose release failed is reaped soon. */
const PROBE_LEASE_MS = 1_000;

/**
 * What `Receiver.health` reports.
 * - `healthy`: the store answered `ping()` (a store without `ping` is tried with a `get`) and accepts
 *   writes (`writable`).
 * - `writable`: the last write probe, at most {@link HEALTH_PROBE_INTERVAL_MS} old, succeeded: a claim of a
 *   random key in the reserved scope {@link HEALTH_PROBE_SCOPE} (lease and retention 1 s), released at
 *   once, both through the store contract, so every store is probed alike. A store that answers reads but
 *   refuses writes (a read-only SQLite file, a full disk, Redis at `maxmemory` under `noeviction`, a
 *   PostgreSQL standby) is unhealthy. `undefined` when the store did not answer the ping.
 * - `latencyMs`: the round trip of the ping, in milliseconds.
 * - `expiredLeases`: `in_progress` keys past their lease, counted up to {@link STUCK_KEY_LIMIT}
 *   (`undefined` when the store cannot count them). Not a failure by itself: a retry takes such a key
 *   over; a count that stays up means clients gave up on keys whose holder crashed.
 */
export interface ReceiverHealth extends ComponentHealth {
  readonly store: string;
  readonly latencyMs: number;
  readonly writable: boolean | undefined;
  readonly expiredLeases: number | undefined;
}

/**
 * The write probe of one receiver's store, with its last result cached for
 * {@link HEALTH_PROBE_INTERVAL_MS}; health checks that arrive while a probe runs share it.
 */
export class WriteProbe {
  private last: { readonly at: number; readonly error: string | undefined } | undefined;
  private running: Promise<string | undefined> | undefined;

  constructor(private readonly store: IdempotencyStore) {}

  /** `undefined` when the store accepted the probe's claim and release, else why not (the error's message). */
  async refusal(): Promise<string | undefined> {
    const now = performance.now();
    if (this.last !== undefined && now - this.last.at < HEALTH_PROBE_INTERVAL_MS) return this.last.error;
    this.running ??= this.probe().then((error) => {
      this.last = { at: performance.now(), error };
      this.running = undefined;
      return error;
    });
    return this.running;
  }

  private async probe(): Promise<string | undefined> {
    try {
      const input = { scope: HEALTH_PROBE_SCOPE, key: randomUUID(), fingerprint: 'health-probe', leaseMs: PROBE_LEASE_MS, retentionMs: PROBE_LEASE_MS };
      const claimed = await this.store.claim(input);
      if (!claimed.acquired) return `the health probe's claim of a fresh key was refused (record state ${claimed.record.state})`;
      if (!(await this.store.release(claimed.claim))) return "the health probe's release of its own claim was fenced off";
      return undefined;
    } catch (error) {
      return messageOf(error);
    }
  }
}

/**
 * Pings `store`, probes a write through `probe`, and counts its expired leases; never throws (an
 * unreachable or read-only store is reported as such).
 */
export async function receiverHealth(store: IdempotencyStore, probe: WriteProbe): Promise<ReceiverHealth> {
  const kind = store.kind ?? 'custom';
  const started = performance.now();
  try {
    if (store.ping) await store.ping();
    else await store.get('', '');
  } catch (error) {
    return { healthy: false, store: kind, latencyMs: performance.now() - started, writable: undefined, expiredLeases: undefined, error: messageOf(error) };
  }
  const latencyMs = performance.now() - started;
  const refusal = await probe.refusal();
  try {
    const expiredLeases = store.countExpiredLeases ? await store.countExpiredLeases(STUCK_KEY_LIMIT) : undefined;
    return { healthy: refusal === undefined, store: kind, latencyMs, writable: refusal === undefined, expiredLeases, ...(refusal !== undefined && { error: refusal }) };
  } catch (error) {
    return { healthy: false, store: kind, latencyMs, writable: refusal === undefined, expiredLeases: undefined, error: refusal ?? messageOf(error) };
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
