/**
 * `retrysafe/nats-publisher`: the outbox relay's NATS JetStream publisher (`nats`). A publish resolves on
 * the stream's PubAck; the message id goes in `Nats-Msg-Id`, so JetStream's own duplicate window
 * (https://docs.nats.io/using-nats/developer/develop_jetstream/model_deep_dive#message-deduplication)
 * drops a republished copy before any consumer sees it.
 *
 * @module
 */
import { connect, headers as natsHeaders, type ConnectionOptions, type JetStreamClient, type NatsConnection } from 'nats';
import { describe, requireDurationMs } from '../../core/duration.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';

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
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: createNatsPublisher expects an options object, got ${describe(options)}`);
  }
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
  const subject = options.subject ?? ((message: OutboxMessage) => message.topic);
  if (typeof subject !== 'function') {
    throw new TypeError(`retrysafe: option "subject" must be a function, got ${describe(subject)}`);
  }
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
