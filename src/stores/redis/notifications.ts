/**
 * Completion notifications over Redis pub/sub, for `waitFor`.
 *
 * @module
 */
import type { Subscriber } from './transport.js';

interface Channel {
  readonly listeners: Set<() => void>;
  /** Settles once the SUBSCRIBE is acknowledged, i.e. once a PUBLISH can no longer be missed. */
  readonly subscribed: Promise<void>;
}

/** A subscription to one record's channel. */
interface Subscription {
  /** Resolves when the subscription is live; rejects when SUBSCRIBE fails. */
  readonly ready: Promise<void>;
  /** Resolves on the first message on the channel (or when the notifier closes). */
  readonly changed: Promise<void>;
  /** Stops listening; unsubscribes when this was the channel's last listener. */
  stop(): void;
}

/**
 * Listens on per-record channels, which the complete, release and reap scripts publish to. A connection in
 * subscriber mode can run nothing else, so it is a dedicated one: the caller's `subscriber`, or a
 * duplicate of the store's client opened on first use and closed with the notifier (`Subscriber.close`). Listeners of one
 * channel share one SUBSCRIBE; SUBSCRIBE and UNSUBSCRIBE go out on one connection in order, so the last
 * command sent decides whether the channel stays subscribed.
 */
export class Notifier {
  private connection: Subscriber | undefined;
  private readonly channels = new Map<string, Channel>();
  private closed = false;
  private readonly onMessage = (channel: string): void => {
    for (const listener of [...(this.channels.get(channel)?.listeners ?? [])]) listener();
  };

  /** @param open - returns the subscriber, delivering each message's channel to its listener (called once, on the first subscription) */
  constructor(private readonly open: (onMessage: (channel: string) => void) => Subscriber) {}

  /** Subscribes to `channel`. */
  subscribe(channel: string): Subscription {
    let notify!: () => void;
    const changed = new Promise<void>((resolve) => (notify = resolve));
    if (this.closed) return { ready: Promise.resolve(), changed: Promise.resolve(), stop: () => undefined };
    let entry = this.channels.get(channel);
    if (!entry) {
      const subscribed = this.connect().subscribe(channel);
      const created: Channel = { listeners: new Set(), subscribed };
      // A failed SUBSCRIBE must not poison the channel for later listeners: the next one subscribes anew.
      subscribed.catch(() => {
        if (this.channels.get(channel) === created) this.channels.delete(channel);
      });
      entry = created;
      this.channels.set(channel, entry);
    }
    const { listeners, subscribed } = entry;
    listeners.add(notify);
    const stop = (): void => {
      if (!listeners.delete(notify) || listeners.size > 0 || this.channels.get(channel) !== entry) return;
      this.channels.delete(channel);
      if (!this.closed) this.connection?.unsubscribe(channel).catch(() => undefined);
    };
    return { ready: subscribed, changed, stop };
  }

  /** Wakes every listener, then unsubscribes (a caller's connection) or disconnects (an owned one). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const channels = [...this.channels.keys()];
    for (const channel of channels) this.onMessage(channel);
    this.channels.clear();
    const connection = this.connection;
    if (!connection) return;
    await connection.close(channels);
  }

  private connect(): Subscriber {
    this.connection ??= this.open(this.onMessage);
    return this.connection;
  }
}
