/**
 * `retrysafe/nats` (also `retrysafe/nats-publisher`): NATS JetStream (`nats`) on both sides of the messaging
 * module. The consumer runs a durable pull consumer with explicit acks and settles each message only after
 * the inbox transaction has committed or rolled back. The outbox relay's publisher resolves on the stream's
 * PubAck; the message id goes in `Nats-Msg-Id`, so JetStream's own duplicate window
 * (https://docs.nats.io/using-nats/developer/develop_jetstream/model_deep_dive#message-deduplication)
 * drops a republished copy before any consumer sees it. `startNatsBatchConsumer` (nats-batch.ts) is the
 * consumer in batches, one inbox transaction per batch.
 *
 * @module
 */
import { connect, headers as natsHeaders, type ConnectionOptions, type JetStreamClient, type JsMsg, type NatsConnection } from 'nats';
import { describe, requireDurationMs, requireFunction, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import type { MessageProcessor, RedriveOptions } from '../inbox/processor.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';
import { defaultMessageId, toBrokerMessage } from './nats-message.js';
import { deliverer, InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

export { startNatsBatchConsumer, type NatsBatchConsumerOptions } from './nats-batch.js';

/** Options of {@link startNatsConsumer}. */
export interface NatsConsumerOptions extends RedriveOptions {
  /** A JetStream client (`connection.jetstream()`); the caller owns the connection. */
  readonly jetstream: JetStreamClient;
  /** The stream the durable consumer belongs to. */
  readonly stream: string;
  /**
   * The durable pull consumer's name. Create it with `ack_policy: explicit` and an `ack_wait` longer than
   * the inbox's `handlerTimeoutMs`, or JetStream redelivers a message still being handled.
   */
  readonly consumer: string;
  /** Decides each message: `inboxProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: MessageProcessor;
  /** Messages pulled per request, and the most processed concurrently. @defaultValue 64 */
  readonly maxMessages?: number;
  /** The id used for dedup. @defaultValue the `Nats-Msg-Id` header (JetStream's own publish dedup id) */
  readonly messageId?: (message: JsMsg) => string | undefined;
  /** How long JetStream waits before redelivering a message answered `retry` (`nak` delay), in milliseconds. @defaultValue 1_000 */
  readonly retryDelayMs?: number;
  /** Told about failures that are not a message's fault (the store failing: the message is nak'd). @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/** A running consumer. */
export interface NatsConsumer {
  /** Stops pulling, stops the redrive poll and waits until every running message is settled. */
  stop(): Promise<void>;
}

/**
 * Starts pulling from a durable JetStream consumer. Each message goes to `process`, and only after it
 * returns is the message settled:
 * - `ack` → `ack`;
 * - `retry` (or `process` rejecting, e.g. the database is down) → `nak(retryDelayMs)`: redelivered
 *   after the delay;
 * - `dead_letter` and `reject` → `term`: JetStream never redelivers it (and publishes a
 *   `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED` advisory); the inbox has saved a dead letter.
 *
 * A crash between the commit and the ack leaves the message unacked; JetStream redelivers it after
 * `ack_wait` and the inbox answers the redelivery as a duplicate.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the stream or consumer does not exist
 * @example
 * ```ts
 * import { AckPolicy, connect } from 'nats';
 * import { startNatsConsumer } from 'retrysafe/nats';
 *
 * const nc = await connect({ servers: 'nats://127.0.0.1:4222' });
 * await (await nc.jetstreamManager()).consumers.add('ORDERS', { durable_name: 'billing', ack_policy: AckPolicy.Explicit, ack_wait: 60_000_000_000 });
 * const consumer = await startNatsConsumer({
 *   jetstream: nc.jetstream(),
 *   stream: 'ORDERS',
 *   consumer: 'billing',
 *   process: inboxProcessor(inbox, 'billing', async (message, tx) => { … }),
 * });
 * ```
 */
export async function startNatsConsumer(options: NatsConsumerOptions): Promise<NatsConsumer> {
  requireOptions('startNatsConsumer', options);
  const { jetstream, stream, consumer } = options;
  if (typeof jetstream !== 'object' || jetstream === null || typeof jetstream.consumers?.get !== 'function') {
    throw new TypeError(`retrysafe: startNatsConsumer option "jetstream" must be a JetStreamClient, got ${describe(jetstream)}`);
  }
  for (const [name, value] of [['stream', stream], ['consumer', consumer]] as const) requireNonEmptyString(name, value, undefined, 'startNatsConsumer');
  const { redriveIntervalMs, onError } = resolveCommonOptions('startNatsConsumer', options);
  const maxMessages = requireIntegerIn('maxMessages', options.maxMessages ?? 64, 1, 10_000, 'startNatsConsumer');
  const retryDelayMs = requireDurationMs('retryDelayMs', options.retryDelayMs ?? 1_000);
  const processor = options.process;
  const inFlight = new InFlight();
  const deliver = deliverer<JsMsg>({
    processor,
    messageId: requireMessageId('startNatsConsumer', options.messageId, defaultMessageId),
    toBrokerMessage,
    settle: (message, disposition) => {
      if (disposition === 'ack') message.ack();
      else if (disposition === 'retry') message.nak(retryDelayMs);
      // No reason text: servers before 2.10.4 ignore a `+TERM <reason>` and redeliver the message after ack_wait.
      else message.term();
    },
    onError,
  });

  const messages = await (await jetstream.consumers.get(stream, consumer)).consume({ max_messages: maxMessages });
  // Ends when stop() stops the iterator; a failure (the consumer deleted, the connection closed) goes to onError.
  const pulling = (async () => {
    for await (const message of messages) {
      inFlight.add(deliver(message));
      // Bounded concurrency: the pull loop waits while maxMessages are being handled.
      while (inFlight.size >= maxMessages) await inFlight.one();
    }
  })().catch((error: unknown) => onError(error));
  const poller = new RedrivePoller(processor, redriveIntervalMs, onError);
  return Object.freeze({
    async stop(): Promise<void> {
      await poller.stop();
      messages.stop();
      await pulling;
      await inFlight.all();
    },
  });
}

/** Options of {@link createNatsPublisher}: exactly one of `servers` and `connection`. */
export interface NatsPublisherOptions {
  /** Server URL(s), e.g. `nats://127.0.0.1:4222`; the publisher then owns its connection. */
  readonly servers?: string | readonly string[];
  /** Extra connection options when `servers` is given (reconnect timing, auth, TLS). @defaultValue `{}` */
  readonly connectionOptions?: Omit<ConnectionOptions, 'servers'>;
  /** A connection the caller owns (never closed by the publisher). */
  readonly connection?: NatsConnection;
  /** The subject of a message. @defaultValue the message's `topic` */
  readonly subject?: (message: OutboxMessage) => string;
  /**
   * How long to wait for the PubAck, in milliseconds; keep it below the relay's `publishTimeoutMs`.
   * @defaultValue 5_000
   */
  readonly ackTimeoutMs?: number;
}

/** The JetStream publisher. */
export interface NatsPublisher extends OutboxPublisher {
  /** Drains and closes the connection it opened itself; a given `connection` is left alone. */
  close(): Promise<void>;
}

/** The header carrying the outbox ordering key. */
export const NATS_KEY_HEADER = 'Retrysafe-Key';

/**
 * Creates a JetStream publisher. The subject must belong to a stream (no stream: the publish fails with
 * "no responders" and is retried). A PubAck marked `duplicate` counts as confirmed: the stream already
 * holds that id. An owned connection reconnects forever by default (`maxReconnectAttempts: -1`); a
 * publish made while disconnected waits for the PubAck until the relay's publish timeout.
 *
 * Rejections: any JetStream or connection error rejects with a transient `PublishError`.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * const publisher = createNatsPublisher({ servers: 'nats://127.0.0.1:4222' });
 * const relay = createRelay({ pool, outbox, publisher });
 * ```
 */
export function createNatsPublisher(options: NatsPublisherOptions): NatsPublisher {
  requireOptions('createNatsPublisher', options);
  const { servers, connection } = options;
  if ((servers === undefined) === (connection === undefined)) {
    throw new TypeError('retrysafe: createNatsPublisher needs exactly one of the options "servers" and "connection"');
  }
  const serverList = servers === undefined ? [] : typeof servers === 'string' ? [servers] : [...servers];
  if (servers !== undefined && (serverList.length === 0 || serverList.some((s) => typeof s !== 'string' || s === ''))) {
    throw new TypeError(`retrysafe: option "servers" must be a URL or a non-empty list of URLs, got ${describe(servers)}`);
  }
  if (connection !== undefined && (typeof connection !== 'object' || connection === null || typeof connection.jetstream !== 'function')) {
    throw new TypeError(`retrysafe: option "connection" must be a NatsConnection, got ${describe(connection)}`);
  }
  const connectionOptions = options.connectionOptions ?? {};
  if (typeof connectionOptions !== 'object' || connectionOptions === null) {
    throw new TypeError(`retrysafe: option "connectionOptions" must be an object, got ${describe(connectionOptions)}`);
  }
  const subject = requireFunction<(message: OutboxMessage) => string>('subject', options.subject ?? ((message: OutboxMessage) => message.topic));
  const open =
    connection === undefined
      ? () => connect({ maxReconnectAttempts: -1, ...connectionOptions, servers: serverList })
      : undefined;
  const ackTimeoutMs = requireDurationMs('ackTimeoutMs', options.ackTimeoutMs ?? 5_000);
  return new JetStreamPublisher(connection, open, subject, ackTimeoutMs);
}

class JetStreamPublisher implements NatsPublisher {
  private client: Promise<{ readonly nc: NatsConnection; readonly js: JetStreamClient }> | undefined;

  constructor(
    private readonly given: NatsConnection | undefined,
    private readonly open: (() => Promise<NatsConnection>) | undefined,
    private readonly subject: (message: OutboxMessage) => string,
    private readonly ackTimeoutMs: number,
  ) {}

  async publish(message: OutboxMessage, signal: AbortSignal): Promise<void> {
    const h = natsHeaders();
    for (const [name, value] of Object.entries(message.headers)) h.set(name, value);
    h.set(NATS_KEY_HEADER, message.key);
    try {
      const { js } = await this.jetstream();
      signal.throwIfAborted();
      await js.publish(this.subject(message), message.payload, { msgID: message.id, headers: h, timeout: this.ackTimeoutMs });
    } catch (error) {
      throw new PublishError(`JetStream did not acknowledge the message: ${error instanceof Error ? error.message : String(error)}`, false, { cause: error });
    }
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client === undefined || this.given !== undefined) return;
    const open = await client.catch(() => undefined);
    await open?.nc.drain().catch(() => undefined);
  }

  private jetstream(): Promise<{ readonly nc: NatsConnection; readonly js: JetStreamClient }> {
    const current = this.client;
    if (current !== undefined) {
      return current.then((open) => {
        // A connection closed for good (an owned one only closes after giving up) is replaced.
        if (!open.nc.isClosed() || this.open === undefined) return open;
        if (this.client === current) this.client = undefined;
        return this.jetstream();
      });
    }
    const opening = (async () => {
      const nc = this.given ?? (await (this.open as () => Promise<NatsConnection>)());
      return { nc, js: nc.jetstream() };
    })();
    this.client = opening;
    opening.catch(() => {
      if (this.client === opening) this.client = undefined;
    });
    return opening;
  }
}
