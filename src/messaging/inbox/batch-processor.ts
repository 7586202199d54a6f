/**
 * The batch seam between broker adapters and the inbox: the batched consumers (`startKafkaBatchConsumer`,
 * `startAmqpBatchConsumer`, `startNatsBatchConsumer`) hand a batch of deliveries to a
 * {@link BatchProcessor} and settle each delivery with the disposition it answers for it, only after it
 * returns, that is after the batch's inbox transaction committed or rolled back.
 *
 * @module
 */
import { MAX_MESSAGE_ID_LENGTH } from './errors.js';
import type { Inbox } from './inbox.js';
import { dispositionOf, type BrokerMessage, type Disposition, type MessageHandler } from './processor.js';
import { describe } from '../../core/validate.js';

/**
 * Decides the dispositions of a batch of deliveries: one per message, in input order. A rejection (the
 * inbox's store failing) makes the adapter redeliver every message of the batch. `redrivePending`, when
 * present, is polled by the adapters (every `redriveIntervalMs`) as {@link MessageProcessor.redrivePending} is.
 */
export interface BatchProcessor {
  (messages: readonly BrokerMessage[]): Promise<readonly Disposition[]>;
  readonly redrivePending?: () => Promise<number>;
}

/**
 * Builds the batch processor that runs `handler` through `inbox.handleBatch` for consumer `consumer`: the
 * batch's new messages are applied in one transaction (each under its own savepoint), duplicates are acked
 * without running `handler`, a message whose handler throws is `retry` (alone: the others commit) until the
 * inbox's `maxAttempts`, then `dead_letter`; messages without an id are `reject`.
 *
 * | inbox outcome | disposition |
 * |---|---|
 * | `processed`, `duplicate` | `ack` |
 * | `retry` | `retry` |
 * | `dead_lettered` | `dead_letter` |
 * | `rejected` (no usable id) | `reject` |
 *
 * @throws TypeError when `consumer` is not a valid consumer name or `handler` is not a function
 * @example
 * ```ts
 * const processor = inboxBatchProcessor(inbox, 'billing', async (message, tx) => {
 *   await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.id]);
 * });
 * await startAmqpBatchConsumer({ channel, queue: 'orders', process: processor, maxBatchSize: 50, maxBatchWaitMs: 20 });
 * ```
 */
export function inboxBatchProcessor<Tx>(inbox: Inbox<Tx>, consumer: string, handler: MessageHandler<Tx>): BatchProcessor {
  if (typeof consumer !== 'string' || consumer.length === 0 || consumer.length > MAX_MESSAGE_ID_LENGTH || consumer.includes('\0')) {
    throw new TypeError(`retrysafe: inboxBatchProcessor "consumer" must be a non-empty string of at most ${MAX_MESSAGE_ID_LENGTH} characters without NUL, got ${describe(consumer)}`);
  }
  if (typeof handler !== 'function') {
    throw new TypeError(`retrysafe: inboxBatchProcessor "handler" must be a function, got ${describe(handler)}`);
  }
  const run = async (messages: readonly BrokerMessage[]): Promise<Disposition[]> => {
    const deliveries = messages.map((message) => ({ consumer, messageId: message.id, headers: message.headers, body: message.body, message }));
    const outcomes = await inbox.handleBatch(deliveries, (tx, delivery, context) => handler(delivery.message, tx, context));
    return outcomes.map((outcome) => dispositionOf(outcome.status));
  };
  const redrivePending = async (): Promise<number> => {
    const pending = await inbox.pendingRedrives(consumer);
    if (pending.length > 0) await run(pending.map((letter) => ({ id: letter.messageId, headers: letter.headers, body: letter.body, redelivered: true })));
    return pending.length;
  };
  return Object.assign(run, { redrivePending });
}
