/**
 * `retrysafe/amqp`: a RabbitMQ consumer (`amqplib`) with manual acks that settles each delivery only
 * after the inbox transaction has committed or rolled back.
 *
 * @module
 */
import type { Channel, ConsumeMessage } from 'amqplib';
import { describe } from '../../core/duration.js';
import type { BrokerMessage, MessageProcessor } from '../inbox/processor.js';
import { deliverer, InFlight, ReplayPoller, requireCount, requireMessageId, resolveCommonOptions } from './runner.js';

/** Options of {@link startAmqpConsumer}. */
export interface AmqpConsumerOptions {
  /** An open channel (the caller owns its connection). Its prefetch is set to `prefetch`. */
  readonly channel: Channel;
  /** The queue to consume; it must exist. Give it a dead-letter exchange (`x-dead-letter-exchange`) to keep a broker-side copy of dead letters. */
  readonly queue: string;
  /** Decides each delivery: `inboxProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: MessageProcessor;
  /** Unacknowledged deliveries the broker may push at once (`basic.qos`); also the number processed concurrently. @defaultValue 32 */
  readonly prefetch?: number;
  /** The id used for dedup. @defaultValue the AMQP `messageId` property when it is a string */
  readonly messageId?: (message: ConsumeMessage) => string | undefined;
  /** How often pending replays of dead letters are polled, in milliseconds; `false` turns it off. @defaultValue 5_000 */
  readonly replayIntervalMs?: number | false;
  /** Told about failures that are not a message's fault: the store failing (the message is requeued), an ack on a closed channel. @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/** A running consumer. */
export interface AmqpConsumer {
  /** The broker's consumer tag. */
  readonly consumerTag: string;
  /** Cancels the subscription, stops the replay poll and waits until every running delivery is settled. */
  stop(): Promise<void>;
}

/**
 * Starts consuming `queue` with manual acks. Each delivery goes to `process`, and only after it returns
 * is the message settled:
 * - `ack` → `basic.ack`;
 * - `retry` (or `process` rejecting, e.g. the database is down) → `basic.nack` with requeue, so the
 *   broker delivers it again (RabbitMQ marks it `redelivered`);
 * - `dead_letter` and `reject` → `basic.nack` without requeue: the queue's dead-letter exchange gets it
 *   if one is configured, otherwise the broker drops it; the inbox has saved a dead letter either way
 *   (a rejected message, having no id, is only counted).
 *
 * A crash between the commit and the ack leaves the message unacked; RabbitMQ redelivers it when the
 * connection closes and the inbox answers the redelivery as a duplicate.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the queue does not exist or the channel is closed
 * @example
 * ```ts
 * import amqp from 'amqplib';
 * import { createInbox, createPostgresInboxStore, inboxProcessor } from 'retrysafe/inbox';
 * import { startAmqpConsumer } from 'retrysafe/amqp';
 *
 * const connection = await amqp.connect('amqp://localhost');
 * const channel = await connection.createChannel();
 * const inbox = createInbox({ store: createPostgresInboxStore({ pool }) });
 * const consumer = await startAmqpConsumer({
 *   channel,
 *   queue: 'orders',
 *   process: inboxProcessor(inbox, 'billing', async (message, tx) => {
 *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.id]);
 *   }),
 * });
 * process.on('SIGTERM', () => void consumer.stop());
 * ```
 */
export async function startAmqpConsumer(options: AmqpConsumerOptions): Promise<AmqpConsumer> {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: startAmqpConsumer expects an options object, got ${describe(options)}`);
  }
  const { channel, queue } = options;
  if (typeof channel !== 'object' || channel === null || typeof channel.consume !== 'function') {
    throw new TypeError(`retrysafe: startAmqpConsumer option "channel" must be an amqplib Channel, got ${describe(channel)}`);
  }
  if (typeof queue !== 'string' || queue.length === 0) {
    throw new TypeError(`retrysafe: startAmqpConsumer option "queue" must be a non-empty string, got ${describe(queue)}`);
  }
  const { replayIntervalMs, onError } = resolveCommonOptions('startAmqpConsumer', options);
  const prefetch = requireCount('startAmqpConsumer', 'prefetch', options.prefetch ?? 32, 65_535);
  const processor = options.process;
  const inFlight = new InFlight();
  const deliver = deliverer<ConsumeMessage>({
    processor,
    messageId: requireMessageId('startAmqpConsumer', options.messageId, defaultMessageId),
    toBrokerMessage,
    settle: (message, disposition) => {
      if (disposition === 'ack') channel.ack(message);
      else channel.nack(message, false, disposition === 'retry');
    },
    onError,
  });

  await channel.prefetch(prefetch);
  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      // null: the broker cancelled the subscription (queue deleted, node failover); no more deliveries come.
      if (message === null) onError(new Error(`retrysafe: RabbitMQ cancelled the consumer of queue ${JSON.stringify(queue)}`));
      else inFlight.add(deliver(message));
    },
    { noAck: false },
  );
  const poller = new ReplayPoller(processor, replayIntervalMs, onError);
  return Object.freeze({
    consumerTag,
    async stop(): Promise<void> {
      await poller.stop();
      await channel.cancel(consumerTag).catch((error: unknown) => onError(error));
      await inFlight.all();
    },
  });
}

function defaultMessageId(message: ConsumeMessage): string | undefined {
  const id: unknown = message.properties.messageId;
  return typeof id === 'string' ? id : undefined;
}

function toBrokerMessage(message: ConsumeMessage, id: string | undefined): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.properties.headers ?? {})) {
    if (value === undefined || value === null) continue;
    headers[name] = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : JSON.stringify(value);
  }
  const contentType: unknown = message.properties.contentType;
  if (typeof contentType === 'string') headers['content-type'] = contentType;
  return {
    id,
    headers,
    body: new Uint8Array(message.content.buffer, message.content.byteOffset, message.content.byteLength),
    redelivered: message.fields.redelivered,
  };
}
