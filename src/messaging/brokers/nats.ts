/**
 * `retrysafe/nats`: a NATS JetStream consumer (`nats`) on a durable pull consumer with explicit acks that
 * settles each message only after the inbox transaction has committed or rolled back.
 *
 * @module
 */
import type { JetStreamClient, JsMsg } from 'nats';
import { describe, requireDurationMs } from '../../core/duration.js';
import type { BrokerMessage, MessageProcessor } from '../inbox/processor.js';
import { deliverer, InFlight, ReplayPoller, requireCount, requireMessageId, resolveCommonOptions } from './runner.js';

/** Options of {@link startNatsConsumer}. */
export interface NatsConsumerOptions {
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
  /** How often pending replays of dead letters are polled, in milliseconds; `false` turns it off. @defaultValue 5_000 */
  readonly replayIntervalMs?: number | false;
  /** Told about failures that are not a message's fault (the store failing: the message is nak'd). @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/** A running consumer. */
export interface NatsConsumer {
  /** Stops pulling, stops the replay poll and waits until every running message is settled. */
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
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: startNatsConsumer expects an options object, got ${describe(options)}`);
  }
  const { jetstream, stream, consumer } = options;
  if (typeof jetstream !== 'object' || jetstream === null || typeof jetstream.consumers?.get !== 'function') {
    throw new TypeError(`retrysafe: startNatsConsumer option "jetstream" must be a JetStreamClient, got ${describe(jetstream)}`);
  }
  for (const [name, value] of [['stream', stream], ['consumer', consumer]] as const) {
    if (typeof value !== 'string' || value.length === 0) {
      throw new TypeError(`retrysafe: startNatsConsumer option "${name}" must be a non-empty string, got ${describe(value)}`);
    }
  }
  const { replayIntervalMs, onError } = resolveCommonOptions('startNatsConsumer', options);
  const maxMessages = requireCount('startNatsConsumer', 'maxMessages', options.maxMessages ?? 64, 10_000);
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
  const poller = new ReplayPoller(processor, replayIntervalMs, onError);
  return Object.freeze({
    async stop(): Promise<void> {
      await poller.stop();
      messages.stop();
      await pulling;
      await inFlight.all();
    },
  });
}

function defaultMessageId(message: JsMsg): string | undefined {
  const id = message.headers?.get('Nats-Msg-Id');
  return id === undefined || id === '' ? undefined : id;
}

function toBrokerMessage(message: JsMsg, id: string | undefined): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const name of message.headers?.keys() ?? []) headers[name] = message.headers?.get(name) ?? '';
  return { id, headers, body: message.data, redelivered: message.redelivered };
}
