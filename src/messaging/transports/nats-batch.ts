/**
 * The batched JetStream consumer (`startNatsBatchConsumer`, exported by `retrysafe/nats`): messages pulled
 * from a durable consumer are gathered into batches, each batch goes to a {@link BatchProcessor}
 * (`inboxBatchProcessor`: one inbox transaction per batch), and each message is acked, nak'd or term'd by
 * its own disposition after that returns.
 *
 * @module
 */
import type { JetStreamClient, JsMsg } from 'nats';
import { describe, requireDurationMs, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import type { BatchProcessor } from '../inbox/batch-processor.js';
import type { Disposition, RedriveOptions } from '../inbox/processor.js';
import { Batcher, requireBatchFits, resolveBatching, settleBatch, type BatchingOptions } from './batcher.js';
import type { NatsConsumer } from './nats.js';
import { defaultMessageId, toBrokerMessage } from './nats-message.js';
import { extractId, InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

/** Options of {@link startNatsBatchConsumer}. */
export interface NatsBatchConsumerOptions extends RedriveOptions, BatchingOptions {
  /** A JetStream client (`connection.jetstream()`); the caller owns the connection. */
  readonly jetstream: JetStreamClient;
  /** The stream the durable consumer belongs to. */
  readonly stream: string;
  /**
   * The durable pull consumer's name. Create it with `ack_policy: explicit`, `max_ack_pending` at least
   * `maxBatchSize` (or -1, no limit), and an `ack_wait` longer than `maxBatchWaitMs` plus the batch's
   * handling, or JetStream redelivers messages of a batch still being handled.
   */
  readonly consumer: string;
  /** Decides each batch: `inboxBatchProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: BatchProcessor;
  /**
   * Messages pulled per request, and the most held unsettled at once (gathering or being handled); at least
   * `maxBatchSize`. @defaultValue twice `maxBatchSize` (at most 10,000)
   */
  readonly maxMessages?: number;
  /** The id used for dedup. @defaultValue the `Nats-Msg-Id` header (JetStream's own publish dedup id) */
  readonly messageId?: (message: JsMsg) => string | undefined;
  /** How long JetStream waits before redelivering a message answered `retry` (`nak` delay), in milliseconds. @defaultValue 1_000 */
  readonly retryDelayMs?: number;
  /** Told about failures that are not a message's fault (the store failing: the batch is nak'd). @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/**
 * Starts pulling from a durable JetStream consumer, in batches: messages are gathered until `maxBatchSize`
 * of them arrived or `maxBatchWaitMs` passed since the batch's first, the batch goes to `process`, and
 * only after it returns is each message settled by its own disposition:
 * - `ack` (processed or duplicate) → `ack`;
 * - `retry` (that message's handler threw; its savepoint alone rolled back) → `nak(retryDelayMs)`;
 * - `dead_letter` (the inbox gave up after `maxAttempts`) and `reject` (no id) → `term`;
 * - `process` rejecting (the database is down) → every message of the batch is `nak(retryDelayMs)`.
 *
 * A crash between the batch's commit and the acks leaves its messages unacked; JetStream redelivers them
 * after `ack_wait` and the inbox answers each as a duplicate.
 *
 * @throws TypeError naming the option when an option is invalid, when `maxMessages` is below
 *   `maxBatchSize`, or when the durable consumer's `max_ack_pending` is
 * @throws the driver's error when the stream or consumer does not exist
 * @example
 * ```ts
 * import { createInbox, createPostgresInboxStore, inboxBatchProcessor } from 'retrysafe/inbox';
 * import { startNatsBatchConsumer } from 'retrysafe/nats';
 *
 * const consumer = await startNatsBatchConsumer({
 *   jetstream: nc.jetstream(),
 *   stream: 'ORDERS',
 *   consumer: 'billing',
 *   maxBatchSize: 50,
 *   maxBatchWaitMs: 20,
 *   process: inboxBatchProcessor(inbox, 'billing', async (message, tx) => { … }),
 * });
 * ```
 */
export async function startNatsBatchConsumer(options: NatsBatchConsumerOptions): Promise<NatsConsumer> {
  const adapter = 'startNatsBatchConsumer';
  requireOptions(adapter, options);
  const { jetstream, stream, consumer } = options;
  if (typeof jetstream !== 'object' || jetstream === null || typeof jetstream.consumers?.get !== 'function') {
    throw new TypeError(`retrysafe: ${adapter} option "jetstream" must be a JetStreamClient, got ${describe(jetstream)}`);
  }
  for (const [name, value] of [['stream', stream], ['consumer', consumer]] as const) requireNonEmptyString(name, value, undefined, adapter);
  const { redriveIntervalMs, onError } = resolveCommonOptions(adapter, options);
  const size = requireIntegerIn('maxBatchSize', options.maxBatchSize ?? 50, 1, 10_000, adapter);
  const maxMessages = requireIntegerIn('maxMessages', options.maxMessages ?? Math.min(2 * size, 10_000), 1, 10_000, adapter);
  const batching = resolveBatching(adapter, options, 'option "maxMessages"', maxMessages);
  const retryDelayMs = requireDurationMs('retryDelayMs', options.retryDelayMs ?? 1_000, adapter);
  const messageId = requireMessageId(adapter, options.messageId, defaultMessageId);
  const processor = options.process;

  const pull = await jetstream.consumers.get(stream, consumer);
  const maxAckPending = (await pull.info()).config.max_ack_pending;
  // -1 (or 0, unset): no limit.
  if (maxAckPending !== undefined && maxAckPending > 0) requireBatchFits(adapter, batching.maxBatchSize, `the consumer's max_ack_pending`, maxAckPending);

  const settle = (message: JsMsg, disposition: Disposition): void => {
    if (disposition === 'ack') message.ack();
    else if (disposition === 'retry') message.nak(retryDelayMs);
    // No reason text: servers before 2.10.4 ignore a `+TERM <reason>` and redeliver the message after ack_wait.
    else message.term();
  };
  const inFlight = new InFlight();
  // A settle failing because the connection closed: JetStream redelivers the unsettled messages after ack_wait.
  const batcher = new Batcher<JsMsg>(batching, inFlight, (batch) =>
    settleBatch(batch, processor, (message) => toBrokerMessage(message, extractId(messageId, message)), settle, onError),
  );

  const messages = await pull.consume({ max_messages: maxMessages });
  // Ends when stop() stops the iterator; a failure (the consumer deleted, the connection closed) goes to onError.
  const pulling = (async () => {
    for await (const message of messages) {
      batcher.add(message);
      // Bounded: the pull loop waits while maxMessages are gathered or being handled.
      await batcher.below(maxMessages);
    }
  })().catch((error: unknown) => onError(error));
  const poller = new RedrivePoller(processor, redriveIntervalMs, onError);
  return Object.freeze({
    async stop(): Promise<void> {
      await poller.stop();
      messages.stop();
      await pulling;
      batcher.flush();
      await inFlight.all();
    },
  });
}
