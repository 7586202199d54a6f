/**
 * Options of `createRelay` and their validation (once, in the factory). Durations are in milliseconds.
 *
 * @module
 */
import type { Meter } from '@opentelemetry/api';
import type pg from 'pg';
import type { Clock } from '../../core/clock.js';
import { describe, requireClock, requireCount, requireDurationMs, requireFunction, requireOptions } from '../../core/validate.js';
import { isListenOption, type ListenOption } from '../../stores/postgres/listen-session.js';
import type { OutboxEvent } from './metrics.js';
import type { Outbox } from './outbox.js';
import type { OutboxPublisher } from './publisher.js';
import { statementsOf, type OutboxStatements } from './statements.js';

/** Options of `createRelay`. Durations in milliseconds. */
export interface RelayOptions {
  /** The pool claims and updates run on (never ended by the relay); LISTEN opens one extra connection with its settings. */
  readonly pool: pg.Pool;
  /**
   * The connection the relay LISTENs (and holds the outbox's waiting lock) on: a `pg.ClientConfig` (e.g.
   * `{ connectionString }`) for a session straight to PostgreSQL, or `false` for none, the relay then
   * polling every `pollIntervalMs`. Behind PgBouncer in transaction mode the pool's own settings cannot
   * work (a LISTEN through the pooler never hears a notification): the relay reports an error naming this
   * option once, through `onEvent`, and polls.
   * @defaultValue a dedicated connection with the pool's settings
   */
  readonly listen?: pg.ClientConfig | false;
  /** The outbox whose rows to publish, as `createOutbox` made it (the relay runs its statements). */
  readonly outbox: Outbox;
  /** Where messages go. The relay never closes it: its owner does, after `stop()`. */
  readonly publisher: OutboxPublisher;
  /** Rows claimed per statement at most. @defaultValue 500 */
  readonly batchSize?: number;
  /**
   * Batches in flight at once in this relay (`start()` runs this many claim-publish loops, so one batch's
   * claim overlaps another's publishing). Loops coordinate like separate relays, except that a claim which
   * found nothing while another batch of this relay was in flight waits for one to finish before claiming
   * again (its keys are the ones leased). @defaultValue 1
   */
  readonly concurrency?: number;
  /**
   * Rows of one key per batch at most; a key's rows are published one after another, so this bounds how
   * long one key holds a batch. @defaultValue 20
   */
  readonly perKeyLimit?: number;
  /**
   * How long a claim holds its rows; after it, another relay may take them over (a killed relay loses
   * nothing). Must exceed `publishTimeoutMs`. @defaultValue 30_000
   */
  readonly leaseMs?: number;
  /** How long one publish may wait for the broker's confirm before it counts as failed. @defaultValue 10_000 */
  readonly publishTimeoutMs?: number;
  /** Poll interval when no NOTIFY arrives (NOTIFY is an optimisation; polling is the guarantee). @defaultValue 1_000 */
  readonly pollIntervalMs?: number;
  /** Attempts (claims) after which a failing message is dead-lettered. @defaultValue 10 */
  readonly maxAttempts?: number;
  /** Wait before the second attempt; doubles per attempt (exponential backoff). @defaultValue 500 */
  readonly backoffBaseMs?: number;
  /** Longest wait between attempts. @defaultValue 60_000 */
  readonly backoffMaxMs?: number;
  /** Time source for leases, backoff and latencies (milliseconds). @defaultValue the outbox's clock */
  readonly clock?: Clock;
  /**
   * OpenTelemetry meter for the counter, histograms and status gauges (see `OUTBOX_INSTRUMENTS`).
   * @defaultValue the global provider's `retrysafe` meter (`metrics.getMeterProvider()`), read as each claim
   * starts: an SDK registered after the relay was created is recorded to, and its gauges observed on, from
   * the next claim on
   */
  readonly meter?: Meter;
  /** Called synchronously with every outcome; a throw from it is ignored. @defaultValue none */
  readonly onEvent?: (event: OutboxEvent) => void;
}

/** Defaults of {@link RelayOptions}. */
export const RELAY_DEFAULTS = Object.freeze({
  batchSize: 500,
  concurrency: 1,
  perKeyLimit: 20,
  leaseMs: 30_000,
  publishTimeoutMs: 10_000,
  pollIntervalMs: 1_000,
  maxAttempts: 10,
  backoffBaseMs: 500,
  backoffMaxMs: 60_000,
});

/** Validated, frozen options, with the outbox's statements. */
export interface ResolvedRelayOptions {
  readonly pool: pg.Pool;
  readonly listen: ListenOption;
  readonly outbox: Outbox;
  /** The outbox's statements, from `createOutbox` through `statementsOf`. */
  readonly sql: OutboxStatements;
  readonly publisher: OutboxPublisher;
  readonly batchSize: number;
  readonly concurrency: number;
  readonly perKeyLimit: number;
  readonly leaseMs: number;
  readonly publishTimeoutMs: number;
  readonly pollIntervalMs: number;
  readonly maxAttempts: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly clock: Clock;
  readonly meter: Meter | undefined;
  readonly onEvent: ((event: OutboxEvent) => void) | undefined;
}

/**
 * Validates the options of `createRelay`.
 *
 * @throws TypeError naming the option and the value when an option is invalid, or when `leaseMs` does not
 *   exceed `publishTimeoutMs`
 */
export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  requireOptions('createRelay', options);
  const { pool, outbox, publisher, onEvent } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function') {
    throw new TypeError(`retrysafe: option "pool" must be a pg.Pool, got ${describe(pool)}`);
  }
  const sql = typeof outbox === 'object' && outbox !== null ? statementsOf(outbox) : undefined;
  if (sql === undefined) {
    throw new TypeError(`retrysafe: option "outbox" must come from createOutbox, got ${describe(outbox)}`);
  }
  if (typeof publisher !== 'object' || publisher === null || typeof publisher.publish !== 'function') {
    throw new TypeError(`retrysafe: option "publisher" must have a publish() method, got ${describe(publisher)}`);
  }
  const clock = requireClock(options.clock ?? outbox.clock);
  if (onEvent !== undefined) requireFunction('onEvent', onEvent);
  const { meter } = options;
  if (meter !== undefined && (typeof meter !== 'object' || meter === null || typeof meter.createCounter !== 'function')) {
    throw new TypeError(`retrysafe: option "meter" must be an OpenTelemetry Meter, got ${describe(meter)}`);
  }
  if (!isListenOption(options.listen)) {
    throw new TypeError(`retrysafe: option "listen" must be a pg.ClientConfig or false, got ${describe(options.listen)}`);
  }
  const d = RELAY_DEFAULTS;
  const resolved: ResolvedRelayOptions = {
    pool,
    listen: options.listen,
    outbox,
    sql,
    publisher,
    batchSize: requireCount('batchSize', options.batchSize ?? d.batchSize),
    concurrency: requireCount('concurrency', options.concurrency ?? d.concurrency),
    perKeyLimit: requireCount('perKeyLimit', options.perKeyLimit ?? d.perKeyLimit),
    leaseMs: requireDurationMs('leaseMs', options.leaseMs ?? d.leaseMs),
    publishTimeoutMs: requireDurationMs('publishTimeoutMs', options.publishTimeoutMs ?? d.publishTimeoutMs),
    pollIntervalMs: requireDurationMs('pollIntervalMs', options.pollIntervalMs ?? d.pollIntervalMs),
    maxAttempts: requireCount('maxAttempts', options.maxAttempts ?? d.maxAttempts),
    backoffBaseMs: requireDurationMs('backoffBaseMs', options.backoffBaseMs ?? d.backoffBaseMs),
    backoffMaxMs: requireDurationMs('backoffMaxMs', options.backoffMaxMs ?? d.backoffMaxMs),
    clock,
    meter,
    onEvent,
  };
  if (resolved.leaseMs <= resolved.publishTimeoutMs) {
    throw new TypeError(
      `retrysafe: option "leaseMs" (${resolved.leaseMs}) must exceed "publishTimeoutMs" (${resolved.publishTimeoutMs}), or a slow publish would lose its lease`,
    );
  }
  return Object.freeze(resolved);
}
