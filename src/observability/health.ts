/**
 * Health checks: the receiver's (store reachability, keys stuck past their lease), the outbox's (backlog,
 * oldest unsent age, dead letters) and the inbox's (dead letters), and the JSON body and status a health
 * route answers with (200 when every check is healthy, 503 otherwise). The framework routes are
 * `healthRoute` in `retrysafe/express`, `retrysafe/fastify` and `retrysafe/hono`.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import type { IdempotencyStore } from '../core/store.js';

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
 * What {@link Receiver.health} reports.
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

/** A named health check; it should resolve even when its component is down (see {@link checkHealth}). */
export type HealthCheck = () => Promise<ComponentHealth>;

/** The body a health route sends. */
export interface HealthReport {
  readonly status: 'ok' | 'unavailable';
  readonly checks: Readonly<Record<string, ComponentHealth>>;
}

/** Pings `store` and counts its expired leases; never throws. */
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
    return { healthy: false, store: kind, latencyMs: performance.now() - started, expiredLeases: undefined, error: messageOf(error) };
  }
}

/** The part of an outbox's status a health check reads (see `Outbox.status` in `retrysafe/outbox`). */
export interface OutboxBacklog {
  readonly pending: number;
  readonly oldestPendingAgeMs: number;
  readonly deadLetters: number;
}

/**
 * A health check of an outbox: `pending` (backlog), `oldestPendingAgeMs` and `deadLetters`. Unhealthy
 * when the status cannot be read, or when the oldest unsent message is older than `maxLagMs`.
 *
 * @param status - reads the outbox's status, e.g. `() => outbox.status(pool)`
 * @param maxLagMs - the oldest unsent age, in milliseconds, above which the relay is called stuck
 * @throws TypeError when `maxLagMs` is not a positive number
 * @example
 * ```ts
 * const checks = { outbox: outboxHealthCheck(() => outbox.status(pool), 60_000) };
 * ```
 */
export function outboxHealthCheck(status: () => Promise<OutboxBacklog>, maxLagMs: number): HealthCheck {
  if (typeof maxLagMs !== 'number' || !(maxLagMs > 0)) {
    throw new TypeError(`retrysafe: outboxHealthCheck "maxLagMs" must be a positive number of milliseconds, got ${String(maxLagMs)}`);
  }
  return async () => {
    try {
      const s = await status();
      return {
        healthy: s.oldestPendingAgeMs <= maxLagMs,
        pending: s.pending,
        oldestPendingAgeMs: s.oldestPendingAgeMs,
        deadLetters: s.deadLetters,
        ...(s.oldestPendingAgeMs > maxLagMs && { error: `the oldest unsent message is ${s.oldestPendingAgeMs} ms old (limit ${maxLagMs} ms)` }),
      };
    } catch (error) {
      return { healthy: false, error: messageOf(error) };
    }
  };
}

/**
 * A health check of an inbox: `deadLetters`, counted up to `limit`. Dead letters are reported, not a
 * failure (they wait for a redrive); unhealthy only when the inbox store cannot be read.
 *
 * @param deadLetters - lists dead letters, e.g. `(limit) => inbox.deadLetters({ limit })`
 * @example
 * ```ts
 * const checks = { inbox: inboxHealthCheck((limit) => inbox.deadLetters({ limit })) };
 * ```
 */
export function inboxHealthCheck(deadLetters: (limit: number) => Promise<readonly unknown[]>, limit = STUCK_KEY_LIMIT): HealthCheck {
  return async () => {
    try {
      return { healthy: true, deadLetters: (await deadLetters(limit)).length };
    } catch (error) {
      return { healthy: false, error: messageOf(error) };
    }
  };
}

/**
 * Runs every check at once and builds a health route's answer: status 200 with `status: "ok"` when each
 * is healthy, 503 with `status: "unavailable"` otherwise; a check that throws counts as unhealthy.
 *
 * @example
 * ```ts
 * const { status, body } = await checkHealth({ idempotency: () => receiver.health() });
 * ```
 */
export async function checkHealth(checks: Readonly<Record<string, HealthCheck>>): Promise<{ status: 200 | 503; body: HealthReport }> {
  const names = Object.keys(checks);
  const results = await Promise.all(
    names.map(async (name): Promise<ComponentHealth> => {
      try {
        return await (checks[name] as HealthCheck)();
      } catch (error) {
        return { healthy: false, error: messageOf(error) };
      }
    }),
  );
  const report: Record<string, ComponentHealth> = {};
  names.forEach((name, i) => {
    report[name] = results[i] as ComponentHealth;
  });
  const healthy = results.every((r) => r.healthy);
  return { status: healthy ? 200 : 503, body: { status: healthy ? 'ok' : 'unavailable', checks: report } };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
