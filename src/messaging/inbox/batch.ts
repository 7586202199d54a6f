/**
 * The inbox's batch path (`inbox.handleBatch`): many deliveries of one consumer deduplicated and applied in
 * one transaction, one outcome per delivery.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import { describe, requireFunction } from '../../core/validate.js';
import { MessageIdMissingError } from './errors.js';
import type { Delivery, HandlerContext, InboxHandler, InboxOutcome } from './inbox.js';
import type { InboxMetrics } from './metrics.js';
import { requireMessageId, requireName } from './names.js';
import type { ResolvedInboxOptions } from './options.js';
import type { BatchItem, BatchItemResult } from './store.js';
import type { DeliverySpan, InboxTraces } from './traces.js';

/** One delivery's outcome in {@link Inbox.handleBatch}: an {@link InboxOutcome}, or `rejected` for a delivery without a usable id. */
export type InboxBatchOutcome = InboxOutcome | { readonly status: 'rejected'; readonly error: MessageIdMissingError };

/**
 * The business code of one message of a batch: `delivery` is the object passed in (so it may carry fields
 * of your own); its writes go through `tx` and commit with its processed mark.
 */
export type InboxBatchHandler<Tx, D extends Delivery> = (tx: Tx, delivery: D, context: HandlerContext) => Promise<void>;

/** What the batch path uses of the inbox it belongs to. */
export interface BatchHost<Tx> {
  readonly config: ResolvedInboxOptions<Tx>;
  readonly metrics: InboxMetrics;
  readonly traces: InboxTraces;
  /** Counts deliveries of (consumer, id) in progress in this process (see `handle`). */
  track(key: string, step: 1 | -1): void;
  handle(delivery: Delivery, fn: InboxHandler<Tx>): Promise<InboxOutcome>;
  report(consumer: string, messageId: string, outcome: InboxOutcome, seconds: number, span: DeliverySpan | undefined): void;
}

/** A distinct message id of the batch and the delivery that first carried it. */
interface Unique<D> {
  readonly messageId: string;
  readonly delivery: D;
  readonly index: number;
}

/** The implementation of `inbox.handleBatch`; see its documentation in `inbox.ts`. */
export async function handleInboxBatch<Tx, D extends Delivery>(
  host: BatchHost<Tx>,
  deliveries: readonly D[],
  fn: InboxBatchHandler<Tx, D>,
): Promise<InboxBatchOutcome[]> {
  if (!Array.isArray(deliveries)) throw new TypeError(`retrysafe: handleBatch "deliveries" must be an array, got ${describe(deliveries)}`);
  requireFunction('fn', fn, 'handleBatch');
  const list = deliveries as readonly D[];
  if (list.length === 0) return [];
  const consumer = requireName('consumer', list[0]?.consumer);
  const outcomes: (InboxBatchOutcome | undefined)[] = new Array<InboxBatchOutcome | undefined>(list.length);
  const unique: Unique<D>[] = [];
  const first = new Map<string, number>();
  const copyOf: (number | undefined)[] = [];
  list.forEach((delivery, index) => {
    if (delivery.consumer !== consumer) {
      throw new TypeError(`retrysafe: every delivery of a batch must name one consumer ("${consumer}"), got ${describe(delivery.consumer)} at index ${index}`);
    }
    try {
      const messageId = requireMessageId(delivery.messageId);
      const seen = first.get(messageId);
      copyOf[index] = seen;
      if (seen === undefined) {
        first.set(messageId, index);
        unique.push({ messageId, delivery, index });
      }
    } catch (error) {
      if (!(error instanceof MessageIdMissingError)) throw error;
      host.metrics.emit({ type: 'rejected', consumer, messageId: undefined, attempts: undefined }, undefined);
      host.traces.end(host.traces.start(consumer, delivery.messageId, delivery.headers ?? {}), 'rejected', undefined, { error });
      outcomes[index] = { status: 'rejected', error };
    }
  });
  const run = (delivery: D): InboxHandler<Tx> => (tx, context) => fn(tx, delivery, context);
  const { store } = host.config;
  if (store.beginBatch === undefined || store.processBatch === undefined) {
    for (const { delivery, index } of unique) outcomes[index] = await host.handle(delivery, run(delivery));
  } else {
    const suspects = await inOneTransaction(host, consumer, unique, run, outcomes);
    // Each suspect runs alone and counts its own attempt (see `BatchBeginResult`).
    for (const { delivery, index } of suspects) outcomes[index] = await host.handle(delivery, run(delivery));
  }
  return list.map((delivery, index) => {
    const source = copyOf[index];
    if (source === undefined) return outcomes[index] as InboxBatchOutcome;
    const shared = outcomes[source] as InboxOutcome;
    if (shared.status !== 'processed') return shared;
    // A later copy of an id the batch processed: a duplicate, reported as one.
    host.metrics.emit({ type: 'duplicate', consumer, messageId: delivery.messageId, attempts: undefined }, undefined);
    return { status: 'duplicate' };
  });
}

/**
 * Counts the batch's fresh messages in one committed step, applies them in one transaction and writes their
 * outcomes into `outcomes`; returns the suspects, which the caller runs alone.
 */
async function inOneTransaction<Tx, D extends Delivery>(
  host: BatchHost<Tx>,
  consumer: string,
  unique: readonly Unique<D>[],
  run: (delivery: D) => InboxHandler<Tx>,
  outcomes: (InboxBatchOutcome | undefined)[],
): Promise<Unique<D>[]> {
  const { store, clock, handlerTimeoutMs, maxAttempts } = host.config;
  const started = performance.now();
  const spans: (DeliverySpan | undefined)[] = [];
  const keys = unique.map(({ messageId }) => `${consumer}\0${messageId}`);
  for (const key of keys) host.track(key, 1);
  const suspects: Unique<D>[] = [];
  const counted: number[] = [];
  const direct = new Map<number, InboxOutcome>();
  let results: BatchItemResult[];
  try {
    const begun = await (store.beginBatch as NonNullable<typeof store.beginBatch>)(consumer, unique.map((item) => item.messageId), clock.now());
    begun.forEach((result, position) => {
      if (result.state === 'processed') direct.set(position, { status: 'duplicate' });
      else if (result.state === 'dead') direct.set(position, { status: 'dead_lettered', attempts: undefined, error: undefined });
      else if (result.state === 'suspect') suspects.push(unique[position] as Unique<D>);
      else counted.push(position);
      if (result.state !== 'suspect') {
        const { messageId, delivery } = unique[position] as Unique<D>;
        spans[position] = host.traces.start(consumer, messageId, delivery.headers ?? {});
      }
    });
    const items = counted.map((position): BatchItem<Tx> => {
      const { messageId, delivery } = unique[position] as Unique<D>;
      const handler = run(delivery);
      return {
        messageId,
        message: { headers: delivery.headers ?? {}, body: delivery.body ?? new Uint8Array() },
        run: (tx, signal) => host.traces.within(spans[position], () => handler(tx, { attempt: 1, signal })),
      };
    });
    results = items.length === 0 ? [] : await (store.processBatch as NonNullable<typeof store.processBatch>)(consumer, items, clock.now(), handlerTimeoutMs, maxAttempts);
  } catch (error) {
    const seconds = (performance.now() - started) / 1000;
    for (const [position, item] of unique.entries()) {
      if (suspects.includes(item)) continue;
      host.metrics.storeUnavailable(consumer, seconds);
      host.traces.end(spans[position], 'store_unavailable', undefined, { error });
    }
    throw error;
  } finally {
    for (const key of keys) host.track(key, -1);
  }
  results.forEach((result, n) => direct.set(counted[n] as number, toOutcome(result)));
  const seconds = (performance.now() - started) / 1000;
  for (const [position, outcome] of direct) {
    const { messageId, index } = unique[position] as Unique<D>;
    host.report(consumer, messageId, outcome, seconds, spans[position]);
    outcomes[index] = outcome;
  }
  return suspects;
}

function toOutcome(result: BatchItemResult): InboxOutcome {
  switch (result.state) {
    case 'committed':
      return { status: 'processed', attempts: 1 };
    case 'duplicate':
      return { status: 'duplicate' };
    case 'failed':
      return result.deadLettered
        ? { status: 'dead_lettered', attempts: result.attempts, error: result.error }
        : { status: 'retry', attempts: result.attempts, error: result.error };
  }
}
