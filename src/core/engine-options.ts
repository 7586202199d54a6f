/**
 * The engine's options, checked and resolved once at `createReceiver`: every default filled in, every
 * duration a number of milliseconds, the replay cache built when asked for.
 *
 * @module
 */
import { systemClock } from './clock.js';
import { persistBelow500 } from './attempt-end.js';
import { randomLeaseToken } from './lease-token.js';
import type { PlainEngineOptions, Receiver, TransactionalEngineOptions } from './receiver.js';
import type { StoredResponse } from './record.js';
import { ReplayCache } from './replay-cache.js';
import type { IdempotencyStore, TransactionalStore } from './store.js';
import {
  requireAtMost,
  requireClock,
  requireDurationMs,
  requireFunction,
  requireGenerateId,
  requireIdempotencyStore,
  requireNonNegativeMs,
  requireOneOf,
  requireOptions,
} from './validate.js';

/**
 * The default `maxExecutionMs` of transactional mode, in milliseconds (or `leaseMs`, when longer): how
 * long a transaction may stay open, so none pins the database's snapshot for ever.
 */
const DEFAULT_TRANSACTION_BOUND_MS = 60_000;

/** The options as the engine runs with them. */
interface ResolvedEngineOptions<Tx> {
  readonly store: IdempotencyStore;
  readonly transactional: boolean;
  /** Completed records kept in this process (the `replayCache` option), or none. */
  readonly replays: ReplayCache | undefined;
  /** The resolved `maxExecutionMs` (ms): `undefined` for none. */
  readonly maxExecutionMs: number | undefined;
  readonly options: Receiver<Tx>['options'];
}

/**
 * Checks `options` and fills in the defaults (`leaseMs` 30 s, `retentionMs` 24 h, `inFlight` `'reject'`,
 * `waitTimeoutMs` 10 s, `pollIntervalMs` 25 ms, `completionRetryMs` 10 s; in transactional mode
 * `maxExecutionMs` the longer of 60 s and `leaseMs`).
 *
 * @throws TypeError naming the option when an option is invalid (e.g. `leaseMs` not a positive integer,
 *   `leaseMs` > `retentionMs`, `transactional: true` on a store without `claimTransaction`)
 */
export function resolveEngineOptions<Tx>(options: PlainEngineOptions | TransactionalEngineOptions<Tx>): ResolvedEngineOptions<Tx> {
  requireOptions('createReceiver', options);
  const store = requireIdempotencyStore(options.store);
  const transactional = options.transactional === true;
  if (transactional && typeof (options.store as Partial<TransactionalStore<Tx>>).claimTransaction !== 'function') {
    throw new TypeError('retrysafe: option "transactional" is true but the store has no claimTransaction() method');
  }
  const leaseMs = requireDurationMs('leaseMs', options.leaseMs ?? 30_000);
  const retentionMs = requireDurationMs('retentionMs', options.retentionMs ?? 86_400_000);
  requireAtMost('leaseMs', leaseMs, 'retentionMs', retentionMs);
  const inFlight = requireOneOf('inFlight', options.inFlight ?? 'reject', ['reject', 'wait']);
  const shouldPersist = requireFunction<(response: StoredResponse) => boolean>('shouldPersist', options.shouldPersist ?? persistBelow500);
  const clock = requireClock(options.clock ?? systemClock);
  const generateId = requireGenerateId(options.generateId ?? randomLeaseToken);
  const replays = options.replayCache === undefined ? undefined : new ReplayCache(options.replayCache);
  const maxExecutionMs =
    options.maxExecutionMs !== undefined
      ? requireDurationMs('maxExecutionMs', options.maxExecutionMs)
      : transactional
        ? Math.max(DEFAULT_TRANSACTION_BOUND_MS, leaseMs)
        : undefined;
  const resolved = Object.freeze({
    generateId,
    leaseMs,
    retentionMs,
    inFlight,
    waitTimeoutMs: requireDurationMs('waitTimeoutMs', options.waitTimeoutMs ?? 10_000),
    pollIntervalMs: requireDurationMs('pollIntervalMs', options.pollIntervalMs ?? 25),
    shouldPersist,
    clock,
    replayCache: replays?.options,
    maxExecutionMs,
    completionRetryMs: requireNonNegativeMs('completionRetryMs', options.completionRetryMs ?? 10_000),
  });
  return { store, transactional, replays, maxExecutionMs, options: resolved };
}
