/**
 * The batched Kafka consumer (`startKafkaBatchConsumer`, exported by `retrysafe/kafka`): the client's
 * `eachBatch` mode, each batch of one partition handed to a {@link BatchProcessor} (`inboxBatchProcessor`:
 * one inbox transaction per batch), and each record's offset stored in order, after that returned, by its
 * own disposition.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { requireIntegerIn, requireOptions } from '../../core/validate.js';
import type { BatchProcessor } from '../inbox/batch-processor.js';
import type { Disposition } from '../inbox/processor.js';
import { decideBatch } from './batcher.js';
import { KafkaGroup, type KafkaConsumer, type KafkaGroupOptions } from './kafka-group.js';
import { toBrokerMessage } from './kafka-records.js';
import { extractId } from './runner.js';

/** Options of {@link startKafkaBatchConsumer}. */
export interface KafkaBatchConsumerOptions extends KafkaGroupOptions {
  /** Decides each batch: `inboxBatchProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: BatchProcessor;
  /**
   * Records of one partition handed to `process` at once, at most (`js.consumer.max.batch.size`); a batch
   * holds what the client has fetched, so it is smaller when the partition has fewer waiting. An integer from
   * 1 to 10,000; `consumerConfig` may not set `js.consumer.max.batch.size`. @defaultValue 50
   */
  readonly maxBatchSize?: number;
}

/**
 * Starts a member of consumer group `groupId` on `topics` in `eachBatch` mode. Each batch (records of one
 * partition, in offset order) goes to `process`, and only after it returns, that is after the batch's
 * inbox transaction committed, are its records settled, in offset order:
 * - `ack` (processed or duplicate) → the record's offset is stored (committed every `commitIntervalMs`
 *   and on stop);
 * - `dead_letter` and `reject` → the record is published to the dead-letter topic (as by
 *   `startKafkaConsumer`) and acknowledged there, then its offset is stored;
 * - `retry` (that record's handler threw; its savepoint alone rolled back), or a dead-letter publish that
 *   failed → the offsets before it stay stored, the partition pauses for `retryDelayMs` and is read again
 *   from that record. The records after it in the batch were applied already and come back as duplicates;
 *   the retried record has an attempt on record, so the inbox runs it alone, and dead-letters it after
 *   `maxAttempts`, which lets the partition move on.
 * - `process` rejecting (the database is down) → the whole batch is read again after `retryDelayMs`.
 *
 * A crash after the batch's commit and before its offsets are committed leaves them where they were; the
 * member that gets the partition reads those records again and the inbox answers each as a duplicate.
 *
 * Order: within a batch, a record that failed before runs after the batch's other records (see
 * `inbox.handleBatch`), and a record answered `retry` does not hold back the records behind it in its
 * batch. Where one key's messages must apply strictly in order, use `startKafkaConsumer`.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the brokers cannot be reached or the subscription fails
 * @example
 * ```ts
 * import { createInbox, createPostgresInboxStore, inboxBatchProcessor } from 'retrysafe/inbox';
 * import { startKafkaBatchConsumer } from 'retrysafe/kafka';
 *
 * const consumer = await startKafkaBatchConsumer({
 *   kafka,
 *   groupId: 'billing',
 *   topics: ['orders'],
 *   maxBatchSize: 100,
 *   process: inboxBatchProcessor(inbox, 'billing', async (message, tx) => {
 *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.id]);
 *   }),
 * });
 * ```
 */
export async function startKafkaBatchConsumer(options: KafkaBatchConsumerOptions): Promise<KafkaConsumer> {
  const adapter = 'startKafkaBatchConsumer';
  requireOptions(adapter, options);
  const maxBatchSize = requireIntegerIn('maxBatchSize', options.maxBatchSize ?? 50, 1, 10_000, adapter);
  const group = new KafkaGroup(adapter, options, { 'js.consumer.max.batch.size': maxBatchSize });
  const processor = options.process;

  const settle = async (payload: KafkaJS.EachBatchPayload): Promise<void> => {
    const { topic, partition, messages } = payload.batch;
    const sources = messages.map((message) => `${topic}/${partition}/${message.offset}`);
    const dispositions = await decideBatch(
      processor,
      messages.map((message, index) => toBrokerMessage(message, extractId(group.messageId, message), group.wasRetried(sources[index] as string))),
      group.onError,
    );
    for (const [index, message] of messages.entries()) {
      // Revoked meanwhile (a rebalance): the member that has the partition now reads the rest again.
      if (payload.isStale()) return;
      const source = sources[index] as string;
      const disposition = await group.deadLetter(topic, message, dispositions[index] as Disposition, source);
      // The offsets resolved so far stay stored; the client seeks the partition back to this record.
      if (disposition === 'retry') group.retryLater(source, () => payload.pause());
      group.settled(source);
      payload.resolveOffset(message.offset);
    }
  };

  return group.start(
    {
      eachBatchAutoResolve: false,
      eachBatch: (payload) => {
        const settling = settle(payload);
        group.inFlight.add(settling);
        return settling;
      },
    },
    processor,
  );
}
