/**
 * One LISTEN connection per store, shared by every `waitFor`: completions and releases are announced with
 * NOTIFY on the schema's channel, the payload naming the (scope, key) by a digest, and each waiter is woken
 * by the notification for its own key.
 *
 * The connection is a dedicated `pg.Client`, not a pooled one: a LISTEN session must stay open and must
 * not be handed to other users of the pool, and it must not go through a pooler in transaction mode
 * (refused with an error naming the option `listen`).
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { StoreClosedError } from '../../core/errors.js';
import { openListenSession } from './listen-session.js';

/** The NOTIFY payload for (scope, key): short and bounded whatever the key's length (base64 SHA-256). */
export function topicOf(scope: string, key: string): string {
  return createHash('sha256').update(JSON.stringify([scope, key])).digest('base64');
}

/** Wakes waiters by topic; connects lazily on the first subscription and reconnects after a failure. */
export class CompletionListener {
  private client: Promise<pg.Client> | undefined;
  private current: pg.Client | undefined;
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;

  constructor(
    /** Creates a new, unconnected client with the store's connection settings. */
    private readonly createClient: () => pg.Client,
    /** The `LISTEN …` statement. */
    private readonly listen: string,
  ) {}

  /**
   * Registers `wake` for `topic` and resolves once LISTEN is active, so a notification sent after this
   * resolves is not missed. Returns the unsubscribe function.
   *
   * @throws the driver's error when the LISTEN connection cannot be opened
   */
  async subscribe(topic: string, wake: () => void): Promise<() => void> {
    if (this.closed) throw new StoreClosedError('PostgreSQL');
    const set = this.waiters.get(topic) ?? new Set();
    this.waiters.set(topic, set);
    set.add(wake);
    const unsubscribe = (): void => {
      set.delete(wake);
      if (set.size === 0 && this.waiters.get(topic) === set) this.waiters.delete(topic);
    };
    try {
      await this.connection();
    } catch (error) {
      unsubscribe();
      throw error;
    }
    return unsubscribe;
  }

  /** Wakes every waiter and closes the connection. */
  async close(): Promise<void> {
    this.closed = true;
    this.wakeAll();
    const client = this.client;
    this.client = undefined;
    this.current = undefined;
    if (client) await client.then((c) => c.end()).catch(() => undefined);
  }

  private connection(): Promise<pg.Client> {
    if (this.client === undefined) {
      const opening = this.open();
      this.client = opening;
      // A failed open is forgotten, so the next subscription tries again.
      opening.catch(() => {
        if (this.client === opening) this.client = undefined;
      });
    }
    return this.client;
  }

  private async open(): Promise<pg.Client> {
    const client = this.createClient();
    const lost = (): void => {
      // Notifications may have been missed: drop the connection, and every waiter re-reads. Only once per
      // connection ('error' and 'end' both fire), and never for one already replaced, whose late events
      // would wake waiters that the new connection serves.
      if (this.current !== client) return;
      this.current = undefined;
      this.client = undefined;
      this.wakeAll();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (message: pg.Notification) => {
      const set = message.payload === undefined ? undefined : this.waiters.get(message.payload);
      if (set) for (const wake of [...set]) wake();
    });
    this.current = client;
    try {
      await openListenSession(client, this.listen, "the PostgreSQL store's waitFor (inFlight: 'wait')");
      return client;
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
  }

  private wakeAll(): void {
    for (const set of this.waiters.values()) for (const wake of [...set]) wake();
  }
}
