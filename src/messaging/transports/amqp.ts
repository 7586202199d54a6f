/**
 * `retrysafe/amqp` (also `retrysafe/amqp-publisher`): RabbitMQ (`amqplib`) on both sides of the messaging
 * module. The consumer uses manual acks and settles each delivery only after the inbox transaction has
 * committed or rolled back; the outbox relay's publisher uses publisher confirms
 * (https://www.rabbitmq.com/docs/confirms#publisher-confirms): a publish resolves only on the broker's ack.
 * `startAmqpBatchConsumer` (amqp-batch.ts) is the consumer in batches, one inbox transaction per batch.
 *
 * @module
 */
import amqplib, { type Channel, type ChannelModel, type ConfirmChannel, type ConsumeMessage } from 'amqplib';
import { describe, requireBoolean, requireDurationMs, requireFunction, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import type { MessageProcessor, RedriveOptions } from '../inbox/processor.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';
import { defaultMessageId, toBrokerMessage } from './amqp-message.js';
import { deliverer, InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

export { startAmqpBatchConsumer, type AmqpBatchConsumerOptions } from './amqp-batch.js';

/** Options of {@link startAmqpConsumer}. */
export interface AmqpConsumerOptions extends RedriveOptions {
  /** An open channel (the caller owns its connection). Its prefetch is set to `prefetch`. */
  readonly channel: Channel;
  /**
   * The queue to consume; it must exist unless `quorum` is given. Give it a dead-letter exchange
   * (`x-dead-letter-exchange`) to keep a broker-side copy of dead letters.
   */
  readonly queue: string;
  /**
   * Consume a quorum queue whose dead letters always have somewhere to go. Before consuming, `queue` is
   * declared durable with `x-queue-type: quorum`, `x-dead-letter-exchange: ''` (the default exchange),
   * `x-dead-letter-routing-key: deadLetterQueue`, `x-dead-letter-strategy: at-least-once` (with
   * `x-overflow: reject-publish`, which that strategy requires) and `x-delivery-limit` when given; and
   * `deadLetterQueue` is declared as a durable quorum queue. A message the broker takes away after
   * `deliveryLimit` deliveries (a database down for long, every delivery answered `retry`) then lands in
   * `deadLetterQueue` instead of being dropped.
   *
   * A queue that already exists with other arguments (say a delivery limit and no dead-letter exchange) is
   * refused: RabbitMQ answers the declaration with PRECONDITION_FAILED, the consumer does not start, and
   * the error says which argument differs. RabbitMQ closes the channel on such a refusal.
   * @defaultValue undefined (the queue is consumed as it is)
   */
  readonly quorum?: AmqpQuorumOptions;
  /** Decides each delivery: `inboxProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: MessageProcessor;
  /** Unacknowledged deliveries the broker may push at once (`basic.qos`); also the number processed concurrently. @defaultValue 32 */
  readonly prefetch?: number;
  /** The id used for dedup. @defaultValue the AMQP `messageId` property when it is a string */
  readonly messageId?: (message: ConsumeMessage) => string | undefined;
  /** Told about failures that are not a message's fault: the store failing (the message is requeued), an ack on a closed channel. @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/** The quorum-queue dead-lettering of {@link AmqpConsumerOptions.quorum}. */
export interface AmqpQuorumOptions {
  /** The queue that receives the dead letters (routed through the default exchange). */
  readonly deadLetterQueue: string;
  /**
   * `x-delivery-limit`: deliveries after which the broker dead-letters a message by itself. Keep it above
   * the inbox's `maxAttempts`, so the inbox records its dead letter first.
   * @defaultValue none (no limit on RabbitMQ 3.x; RabbitMQ 4 applies 20 to every quorum queue)
   */
  readonly deliveryLimit?: number;
}

/** A running consumer. */
export interface AmqpConsumer {
  /** The broker's consumer tag. */
  readonly consumerTag: string;
  /** Cancels the subscription, stops the redrive poll and waits until every running delivery is settled. */
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
  requireOptions('startAmqpConsumer', options);
  const { channel, queue } = options;
  if (typeof channel !== 'object' || channel === null || typeof channel.consume !== 'function') {
    throw new TypeError(`retrysafe: startAmqpConsumer option "channel" must be an amqplib Channel, got ${describe(channel)}`);
  }
  requireNonEmptyString('queue', queue, undefined, 'startAmqpConsumer');
  const { redriveIntervalMs, onError } = resolveCommonOptions('startAmqpConsumer', options);
  const prefetch = requireIntegerIn('prefetch', options.prefetch ?? 32, 1, 65_535, 'startAmqpConsumer');
  const quorum = options.quorum === undefined ? undefined : requireQuorum(options.quorum);
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

  if (quorum !== undefined) await declareQuorumQueue(channel, queue, quorum);
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
  const poller = new RedrivePoller(processor, redriveIntervalMs, onError);
  return Object.freeze({
    consumerTag,
    async stop(): Promise<void> {
      await poller.stop();
      await channel.cancel(consumerTag).catch((error: unknown) => onError(error));
      await inFlight.all();
    },
  });
}

function requireQuorum(quorum: unknown): AmqpQuorumOptions {
  const given = (typeof quorum === 'object' && quorum !== null ? quorum : {}) as Partial<AmqpQuorumOptions>;
  const { deliveryLimit } = given;
  const deadLetterQueue = requireNonEmptyString('quorum.deadLetterQueue', given.deadLetterQueue, undefined, 'startAmqpConsumer');
  if (deliveryLimit !== undefined) requireIntegerIn('quorum.deliveryLimit', deliveryLimit, 1, 2 ** 31 - 1, 'startAmqpConsumer');
  return deliveryLimit === undefined ? { deadLetterQueue } : { deadLetterQueue, deliveryLimit };
}

/**
 * Declares the dead-letter queue, then `queue` with its dead-lettering arguments; a queue declared before
 * with other arguments makes RabbitMQ refuse (PRECONDITION_FAILED), which is turned into an error naming it.
 */
async function declareQuorumQueue(channel: Channel, queue: string, quorum: AmqpQuorumOptions): Promise<void> {
  const { deadLetterQueue, deliveryLimit } = quorum;
  const queueArguments: Record<string, unknown> = {
    'x-queue-type': 'quorum',
    'x-dead-letter-exchange': '',
    'x-dead-letter-routing-key': deadLetterQueue,
    'x-dead-letter-strategy': 'at-least-once',
    'x-overflow': 'reject-publish',
  };
  if (deliveryLimit !== undefined) queueArguments['x-delivery-limit'] = deliveryLimit;
  // The refusal also arrives as an 'error' event on the channel, which would crash a process without a listener.
  const swallow = (): void => undefined;
  channel.on('error', swallow);
  try {
    await declare(channel, deadLetterQueue, { 'x-queue-type': 'quorum' }, `the dead-letter queue ${JSON.stringify(deadLetterQueue)}`);
    await declare(channel, queue, queueArguments, `queue ${JSON.stringify(queue)} with dead-lettering to ${JSON.stringify(deadLetterQueue)}`);
  } finally {
    channel.off('error', swallow);
  }
}

async function declare(channel: Channel, name: string, args: Record<string, unknown>, what: string): Promise<void> {
  try {
    await channel.assertQueue(name, { durable: true, arguments: args });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(
      `retrysafe: startAmqpConsumer could not declare ${what} as a quorum queue (${reason}). A queue that exists with other ` +
        'arguments (a delivery limit without a dead-letter exchange drops messages past the limit) must be deleted or changed first; the channel is closed.',
      { cause: error },
    );
  }
}

/** Options of {@link createAmqpPublisher}. */
export interface AmqpPublisherOptions {
  /** The broker URL, e.g. `amqp://guest:guest@127.0.0.1:5672`. */
  readonly url: string;
  /** The exchange to publish to; `''` is the default exchange, which routes by queue name. @defaultValue '' */
  readonly exchange?: string;
  /** The routing key of a message. @defaultValue the message's `topic` */
  readonly routingKey?: (message: OutboxMessage) => string;
  /** Persistent delivery mode (2), so a confirmed message survives a broker restart. @defaultValue true */
  readonly persistent?: boolean;
  /**
   * Publish with the `mandatory` flag: a message no queue receives is returned by the broker and the
   * publish fails (and is retried), instead of being confirmed and dropped. @defaultValue true
   */
  readonly mandatory?: boolean;
  /**
   * Longest wait, in milliseconds, for a connection to open (TCP connect and the AMQP handshake), and again
   * for its confirm channel to open. A connect that gets no answer (a broker address that drops packets, a
   * half-open proxy) or a connection lost before its channel opened fails the publish, and the next
   * publish dials again, so a broker that comes back is found within about this long.
   * @defaultValue 10_000
   */
  readonly connectTimeoutMs?: number;
}

/** The RabbitMQ publisher. */
export interface AmqpPublisher extends OutboxPublisher {
  /** Closes the connection (if open). Later publishes reconnect. */
  close(): Promise<void>;
}

/**
 * Creates a RabbitMQ publisher on a confirm channel. The message id goes in the AMQP `messageId`
 * property (the consumer's inbox deduplicates on it); the outbox headers go in `headers`, with
 * `x-retrysafe-key` carrying the ordering key. The connection opens on the first publish and is reopened
 * after a loss; a loss while messages wait for confirms rejects them (the relay retries them).
 *
 * Rejections: a nack, a return (with `mandatory`), a lost channel or a failed connect (refused, or no
 * answer within `connectTimeoutMs`) reject with a transient `PublishError`.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * const publisher = createAmqpPublisher({ url: 'amqp://localhost', exchange: 'events' });
 * const relay = createRelay({ pool, outbox, publisher });
 * ```
 */
export function createAmqpPublisher(options: AmqpPublisherOptions): AmqpPublisher {
  requireOptions('createAmqpPublisher', options);
  const { url } = options;
  if (typeof url !== 'string' || !/^amqps?:\/\//.test(url)) {
    throw new TypeError(`retrysafe: option "url" must be an amqp:// or amqps:// URL, got ${describe(url)}`);
  }
  const exchange = options.exchange ?? '';
  if (typeof exchange !== 'string') {
    throw new TypeError(`retrysafe: option "exchange" must be a string, got ${describe(exchange)}`);
  }
  const routingKey = requireFunction<(message: OutboxMessage) => string>('routingKey', options.routingKey ?? ((message: OutboxMessage) => message.topic));
  const persistent = requireBoolean('persistent', options.persistent ?? true);
  const mandatory = requireBoolean('mandatory', options.mandatory ?? true);
  const connectTimeoutMs = requireDurationMs('connectTimeoutMs', options.connectTimeoutMs ?? 10_000);
  return new ConfirmPublisher(url, exchange, routingKey, persistent, mandatory, connectTimeoutMs);
}

/** An open connection, its confirm channel, and the ids the broker returned as unroutable. */
interface Session {
  readonly connection: ChannelModel;
  readonly channel: ConfirmChannel;
  readonly returned: Set<string>;
}

class ConfirmPublisher implements AmqpPublisher {
  private session: Promise<Session> | undefined;
  /** The session `session` resolved to, once it did; compared by identity to ignore late events of old ones. */
  private current: Session | undefined;

  constructor(
    private readonly url: string,
    private readonly exchange: string,
    private readonly routingKey: (message: OutboxMessage) => string,
    private readonly persistent: boolean,
    private readonly mandatory: boolean,
    private readonly connectTimeoutMs: number,
  ) {}

  async publish(message: OutboxMessage, signal: AbortSignal): Promise<void> {
    let session: Session;
    try {
      session = await this.open();
    } catch (error) {
      throw new PublishError(`RabbitMQ is unreachable: ${errorMessage(error)}`, false, { cause: error });
    }
    const { channel, returned } = session;
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(new PublishError('The RabbitMQ publish was aborted before its confirm.', false, { cause: signal.reason }));
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        channel.publish(
          this.exchange,
          this.routingKey(message),
          Buffer.from(message.payload.buffer, message.payload.byteOffset, message.payload.byteLength),
          {
            messageId: message.id,
            persistent: this.persistent,
            mandatory: this.mandatory,
            timestamp: Math.floor(message.createdAt / 1000),
            headers: { ...message.headers, 'x-retrysafe-key': message.key },
          },
          (error: unknown) => {
            signal.removeEventListener('abort', onAbort);
            // RabbitMQ sends basic.return before the ack of an unroutable mandatory message.
            const wasReturned = returned.delete(message.id);
            if (error !== null && error !== undefined) {
              reject(new PublishError(`RabbitMQ did not confirm the message: ${errorMessage(error)}`, false, { cause: error }));
            } else if (wasReturned) {
              reject(new PublishError(`RabbitMQ returned the message as unroutable (no queue bound for "${this.routingKey(message)}").`, false));
            } else {
              resolve();
            }
          },
        );
      } catch (error) {
        signal.removeEventListener('abort', onAbort);
        // A channel closed under us: drop the session so the next publish reconnects.
        this.forget(session);
        reject(new PublishError(`RabbitMQ publish failed: ${errorMessage(error)}`, false, { cause: error }));
      }
    });
  }

  async close(): Promise<void> {
    const session = this.session;
    this.session = undefined;
    this.current = undefined;
    if (session === undefined) return;
    const open = await session.catch(() => undefined);
    await open?.connection.close().catch(() => undefined);
  }

  private open(): Promise<Session> {
    if (this.session === undefined) {
      const opening = this.connect();
      this.session = opening;
      // A failed connect is forgotten, so the next publish tries again.
      opening.catch(() => {
        if (this.session === opening) this.session = undefined;
      });
    }
    return this.session;
  }

  private async connect(): Promise<Session> {
    // amqplib's socket `timeout` covers the TCP connect and the handshake, and is lifted once open.
    const connection = await amqplib.connect(this.url, { timeout: this.connectTimeoutMs });
    // Listening from the first moment: a connection lost while its channel opens would otherwise raise an
    // unhandled 'error' (crashing the process) and leave the channel's open unanswered forever.
    const lost = (): void => {
      if (this.current?.connection === connection) this.forget(this.current);
    };
    connection.on('error', lost);
    connection.on('close', lost);
    let channel: ConfirmChannel;
    try {
      channel = await this.openChannel(connection);
    } catch (error) {
      // Not awaited: on a connection that went silent, close() would wait for an answer that never comes.
      void connection.close().catch(() => undefined);
      throw error;
    }
    const session: Session = { connection, channel, returned: new Set() };
    this.current = session;
    channel.on('error', lost);
    channel.on('close', () => {
      lost();
      void connection.close().catch(() => undefined);
    });
    channel.on('return', (returnedMessage: { properties: { messageId?: unknown } }) => {
      const id = returnedMessage.properties.messageId;
      if (typeof id === 'string') session.returned.add(id);
    });
    return session;
  }

  /**
   * Opens the confirm channel, failing when the connection closes first or no answer comes within
   * `connectTimeoutMs` (amqplib itself would wait forever for the channel's open-ok on a connection that
   * died or went silent).
   */
  private async openChannel(connection: ChannelModel): Promise<ConfirmChannel> {
    let timer: NodeJS.Timeout | undefined;
    let onClose: (() => void) | undefined;
    const failed = new Promise<never>((_, reject) => {
      onClose = () => reject(new Error('the connection closed while the confirm channel opened'));
      connection.once('close', onClose);
      timer = setTimeout(() => reject(new Error(`no confirm channel within ${this.connectTimeoutMs} ms`)), this.connectTimeoutMs);
    });
    try {
      return await Promise.race([connection.createConfirmChannel(), failed]);
    } finally {
      clearTimeout(timer);
      if (onClose !== undefined) connection.off('close', onClose);
    }
  }

  private forget(session: Session): void {
    if (this.current !== session) return;
    this.current = undefined;
    this.session = undefined;
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
