/**
 * `createReceiver`: the engine (`src/core`) with the OpenTelemetry observer (`src/observability`) wired
 * in, so every receiver reports its metrics, spans and log lines without further setup.
 *
 * @module
 */
import { createEngine } from './core/engine.js';
import type { PlainEngineOptions, Receiver, TransactionalEngineOptions } from './core/receiver.js';
import { TelemetryObserver, type ObservabilityOptions } from './observability/observer.js';

/** Options of a receiver over a plain store. */
export interface PlainReceiverOptions extends PlainEngineOptions, ObservabilityOptions {}

/** Options of a receiver in transactional mode. */
export interface TransactionalReceiverOptions<Tx> extends TransactionalEngineOptions<Tx>, ObservabilityOptions {}

/**
 * Creates the engine over a store. It reports through `@opentelemetry/api` (the global providers, or the
 * `meterProvider` and `tracerProvider` given) and to `logger`; see docs/operations.md.
 *
 * @throws TypeError naming the option when an option is invalid (e.g. `leaseMs` not a positive integer,
 *   `leaseMs` > `retentionMs`, `transactional: true` on a store without `claimTransaction`)
 * @example
 * ```ts
 * import { createMemoryStore, createReceiver } from 'retrysafe';
 * const receiver = createReceiver({ store: createMemoryStore(), inFlight: 'wait' });
 * ```
 */
export function createReceiver(options: PlainReceiverOptions): Receiver;
export function createReceiver<Tx>(options: TransactionalReceiverOptions<Tx>): Receiver<Tx>;
export function createReceiver<Tx>(options: PlainReceiverOptions | TransactionalReceiverOptions<Tx>): Receiver<Tx> {
  return createEngine<Tx>(options, (store) => new TelemetryObserver(options, store.kind ?? 'custom'));
}
