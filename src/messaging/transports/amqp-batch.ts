/**
 * The batched RabbitMQ consumer (`startAmqpBatchConsumer`, exported by `retrysafe/amqp`): deliveries are
 * gathered into batches, each batch goes to a {@link BatchProcessor} (`inboxBatchProcessor`: one inbox
 * transaction per batch), and each delivery is acked or nacked by its own disposition after that returns.
 *
 * @module
 */
import type { Channel, ConsumeMessage } from 'amqplib';
import { describe, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import type { BatchProcessor } from '../inbox/batch-processor.js';
import type { Disposition, RedriveOptions } from '../inbox/processor.js';
import type { AmqpConsumer } from './amqp.js';
import { defaultMessageId, toBrokerMessage } from './amqp-message.js';
import { Batcher, resolveBatching, settleBatch, type BatchingOptions } from './batcher.js';
import { extractId, InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

/** Options of {@link startAmqpBatchConsumer}. */
export interface AmqpBatchConsumerOptions extends RedriveOptions, BatchingOptions {
  /** An open channel (the caller owns its connection). Its prefetch is set to `prefetch`. */
  readonly channel: Channel;
  /** The queue to consume; it must exist. Give it a dead-letter exchange (`x-dead-letter-exchange`) to keep a broker-side copy of dead letters. */
  readonly queue: string;
  /** Decides each batch: `inboxBatchProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: BatchProcessor;
  /**
   * Unacknowledged deliveries the broker may push at once (`basic.qos`), at least `maxBatchSize`: with more,
   * the next batch gathers while one runs. @defaultValue twice `maxBatchSize` (at most 65,535)
   */
  readonly prefetch?: number;
  /** The id used for dedup. @defaultValue the AMQP `messageId` property when it is a string */
  readonly messageId?: (message: ConsumeMessage) => string | undefined;
  /** Told about failures that are not a message's fault: the store failing (the batch is requeued), an ack on a closed channel. @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/**
 * Starts consuming `queue` with manual acks, in batches: deliveries are gathered until `maxBatchSize` of
 * them arrived or `maxBatchWaitMs` passed since the batch's first, the batch goes to `process`, and only
 * after it returns is each delivery settled by its own disposition:
 * - `ack` (processed or duplicate) → `basic.ack`;
 * - `retry` (that message's handler threw; its savepoint alone rolled back) → `basic.nack` with requeue;
 * - `dead_letter` (the inbox gave up after `maxAttempts`) and `reject` (no id) → `basic.nack` without
 *   requeue: to the queue's dead-letter exchange if it has one;
 * - `process` rejecting (the database is down) → every delivery of the batch is nacked with requeue.
 *
 * A crash between the batch's commit and the acks leaves its deliveries unacked; RabbitMQ redelivers them
 * when the connection closes and the inbox answers each as a duplicate.
 *
 * @throws TypeError naming the option when an option is invalid, or when `prefetch` is below `maxBatchSize`
 * @throws the driver's error when the queue does not exist or the channel is closed
 * @example
 * ```ts
 * import { createInbox, createPostgresInboxStore, inboxBatchProcessor } from 'retrysafe/inbox';
 * import { startAmqpBatchConsumer } from 'retrysafe/amqp';
 *
 * const consumer = await startAmqpBatchConsumer({
 *   channel,
 *   queue: 'orders',
 *   maxBatchSize: 50,
 *   maxBatchWaitMs: 20,
 *   process: inboxBatchProcessor(inbox, 'billing', async (message, tx) => {
 *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.id]);
 *   }),
 * });
 * ```
 */
export async function startAmqpBatchConsumer(options: AmqpBatchConsumerOptions): Promise<AmqpConsumer> {
  const adapter = 'startAmqpBatchConsumer';
  requireOptions(adapter, options);
  const { channel, queue } = options;
  if (typeof channel !== 'object' || channel === null || typeof channel.consume !== 'function') {
    throw new TypeError(`retrysafe: ${adapter} option "channel" must be an amqplib Channel, got ${describe(channel)}`);
  }
  requireNonEmptyString('queue', queue, undefined, adapter);
  const { redriveIntervalMs, onError } = resolveCommonOptions(adapter, options);
  const size = requireIntegerIn('maxBatchSize', options.maxBatchSize ?? 50, 1, 10_000, adapter);
  const prefetch = requireIntegerIn('prefetch', options.prefetch ?? Math.min(2 * size, 65_535), 1, 65_535, adapter);
  const batching = resolveBatching(adapter, options, 'option "prefetch"', prefetch);
  const messageId = requireMessageId(adapter, options.messageId, defaultMessageId);
  const processor = options.process;
  const inFlight = new InFlight();

  const settle = (message: ConsumeMessage, disposition: Disposition): void => {
    if (disposition === 'ack') channel.ack(message);
    else channel.nack(message, false, disposition === 'retry');
  };
  // A settle failing because the channel closed: RabbitMQ redelivers the unsettled deliveries, the inbox dedups them.
  const batcher = new Batcher<ConsumeMessage>(batching, inFlight, (batch) =>
    settleBatch(batch, processor, (message) => toBrokerMessage(message, extractId(messageId, message)), settle, onError),
  );

  await channel.prefetch(prefetch);
  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      // null: the broker cancelled the subscription (queue deleted, node failover); no more deliveries come.
      if (message === null) {
        batcher.flush();
        onError(new Error(`retrysafe: RabbitMQ cancelled the consumer of queue ${JSON.stringify(queue)}`));
      } else batcher.add(message);
    },
    { noAck: false },
  );
  const poller = new RedrivePoller(processor, redriveIntervalMs, onError);
  return Object.freeze({
    consumerTag,
    async stop(): Promise<void> {
      await poller.stop();
      await channel.cancel(consumerTag).catch((error: unknown) => onError(error));
      batcher.flush();
      await inFlight.all();
    },
  });
}
