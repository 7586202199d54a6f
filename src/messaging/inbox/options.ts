/**
 * Options of `createInbox` and their validation (once, in the factory). Durations are in milliseconds.
 *
 * @module
 */
import type { Meter, TracerProvider } from '@opentelemetry/api';
import { systemClock, type Clock } from '../../core/clock.js';
import { describe, requireClock, requireDurationMs, requireFunction, requireIntegerIn, requireOptions } from '../../core/validate.js';
import type { Logger } from '../../observability/logging.js';
import type { InboxEvent } from './metrics.js';
import type { InboxStore } from './store.js';

/** Options of `createInbox`. */
export interface InboxOptions<Tx> {
  /**
   * Where marks, attempts and dead letters live: `createPostgresInboxStore`, `createSqliteInboxStore`, or
   * a store of your own implementing {@link InboxStore}.
   */
  readonly store: InboxStore<Tx>;
  /**
   * Attempts before a message is dead-lettered: failed runs (throw or timeout) and started-but-unfinished
   * runs (a crash) both count. @defaultValue 5
   */
  readonly maxAttempts?: number;
  /** How long one handler run may take before it is rolled back and counted as a failed attempt. @defaultValue 30_000 */
  readonly handlerTimeoutMs?: number;
  /**
   * The longest time after a message's first delivery at which the broker (or a publisher retrying) may
   * still deliver it again. Marks must outlive it. @defaultValue 86_400_000 (24 hours)
   */
  readonly retryHorizonMs?: number;
  /**
   * How long a processed mark is kept; must exceed `retryHorizonMs`, or a late redelivery would run again.
   * @defaultValue 604_800_000 (7 days)
   */
  readonly retentionMs?: number;
  /** Time source for marks, attempts and retention. @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * The OpenTelemetry meter to record on (see `INBOX_INSTRUMENTS`).
   * @defaultValue the global provider's `retrysafe` meter (`metrics.getMeterProvider()`), read at each
   * delivery: an SDK registered after the inbox handled messages is recorded to from the next delivery on
   */
  readonly meter?: Meter;
  /**
   * Where the `retrysafe.inbox.process` spans go (see `INBOX_SPANS`).
   * @defaultValue the global provider (`trace.getTracerProvider()`), read on first use
   */
  readonly tracerProvider?: TracerProvider;
  /**
   * Gets one structured line per dead letter (`event: 'dead_letter'`, level error) with `consumer`,
   * `messageIdHash` (the message id hashed as `keyHash(consumer, messageId)`; the id itself is never
   * logged), `reason` (the last error) and `attempts`. Any logger with pino's calling convention.
   * @defaultValue none
   */
  readonly logger?: Logger;
  /** Called synchronously with every delivery's outcome; a throw from it is ignored. @defaultValue none */
  readonly onEvent?: (event: InboxEvent) => void;
}

/** Validated, frozen options. */
export interface ResolvedInboxOptions<Tx> {
  readonly store: InboxStore<Tx>;
  readonly maxAttempts: number;
  readonly handlerTimeoutMs: number;
  readonly retryHorizonMs: number;
  readonly retentionMs: number;
  readonly clock: Clock;
  readonly meter: Meter | undefined;
  readonly tracerProvider: TracerProvider | undefined;
  readonly logger: Logger | undefined;
  readonly onEvent: ((event: InboxEvent) => void) | undefined;
}

/** Defaults of {@link InboxOptions}. */
export const INBOX_DEFAULTS = Object.freeze({
  maxAttempts: 5,
  handlerTimeoutMs: 30_000,
  retryHorizonMs: 86_400_000,
  retentionMs: 604_800_000,
});

/**
 * Validates the options of `createInbox`.
 *
 * @throws TypeError naming the option and the value when an option is invalid, or when `retentionMs` does
 *   not exceed `retryHorizonMs`
 */
export function resolveInboxOptions<Tx>(options: InboxOptions<Tx>): ResolvedInboxOptions<Tx> {
  requireOptions('createInbox', options);
  const store = requireInboxStore<Tx>(options.store);
  const maxAttempts = requireIntegerIn('maxAttempts', options.maxAttempts ?? INBOX_DEFAULTS.maxAttempts, 1, 1_000_000);
  const handlerTimeoutMs = requireDurationMs('handlerTimeoutMs', options.handlerTimeoutMs ?? INBOX_DEFAULTS.handlerTimeoutMs);
  const retryHorizonMs = requireDurationMs('retryHorizonMs', options.retryHorizonMs ?? INBOX_DEFAULTS.retryHorizonMs);
  const retentionMs = requireDurationMs('retentionMs', options.retentionMs ?? INBOX_DEFAULTS.retentionMs);
  if (retentionMs <= retryHorizonMs) {
    throw new TypeError(
      `retrysafe: option "retentionMs" (${retentionMs}) must exceed "retryHorizonMs" (${retryHorizonMs}); a mark removed before the last redelivery lets that redelivery run again`,
    );
  }
  const clock = requireClock(options.clock ?? systemClock);
  const { meter, tracerProvider, logger, onEvent } = options;
  if (meter !== undefined && (typeof meter !== 'object' || meter === null || typeof meter.createCounter !== 'function')) {
    throw new TypeError(`retrysafe: option "meter" must be an OpenTelemetry Meter, got ${describe(meter)}`);
  }
  if (tracerProvider !== undefined && (typeof tracerProvider !== 'object' || tracerProvider === null || typeof tracerProvider.getTracer !== 'function')) {
    throw new TypeError(`retrysafe: option "tracerProvider" must be an OpenTelemetry TracerProvider, got ${describe(tracerProvider)}`);
  }
  if (logger !== undefined && (typeof logger !== 'object' || logger === null || typeof logger.error !== 'function')) {
    throw new TypeError(`retrysafe: option "logger" must be a logger with pino's error(fields, message), got ${describe(logger)}`);
  }
  if (onEvent !== undefined) requireFunction('onEvent', onEvent);
  return Object.freeze({ store, maxAttempts, handlerTimeoutMs, retryHorizonMs, retentionMs, clock, meter, tracerProvider, logger, onEvent });
}

/** The methods every {@link InboxStore} has. */
const STORE_METHODS = ['begin', 'process', 'fail', 'deadLetters', 'requestRedrive', 'pendingRedrives', 'reap', 'close'] as const;

/**
 * `store` if it has every method of {@link InboxStore}.
 *
 * @throws TypeError naming the option `store` and the value otherwise
 */
function requireInboxStore<Tx>(store: unknown): InboxStore<Tx> {
  if (typeof store !== 'object' || store === null || !STORE_METHODS.every((name) => typeof (store as Record<string, unknown>)[name] === 'function')) {
    throw new TypeError(`retrysafe: option "store" must be an inbox store (createPostgresInboxStore, createSqliteInboxStore), got ${describe(store)}`);
  }
  return store as InboxStore<Tx>;
}
