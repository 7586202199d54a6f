/**
 * Health checks of the outbox (backlog, oldest unsent age, dead letters) and the inbox (dead letters), and
 * the JSON body and status a health route answers with (200 when every check is healthy, 503 otherwise).
 * The receiver's own check is `Receiver.health`. The framework routes are `healthRoute` in
 * `retrysafe/express`, `retrysafe/fastify` and `retrysafe/hono`.
 *
 * @module
 */
import { STUCK_KEY_LIMIT, type ComponentHealth } from '../core/health.js';
import { invalidOption } from '../core/validate.js';

/** A named health check; it should resolve even when its component is down (see {@link checkHealth}). */
export type HealthCheck = () => Promise<ComponentHealth>;

/** The body a health route sends. */
export interface HealthReport {
  readonly status: 'ok' | 'unavailable';
  readonly checks: Readonly<Record<string, ComponentHealth>>;
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
  if (typeof maxLagMs !== 'number' || !(maxLagMs > 0)) throw invalidOption('maxLagMs', 'a positive number of milliseconds', maxLagMs, 'outboxHealthCheck');
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
