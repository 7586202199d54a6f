/**
 * The messaging simulation's view of the real stores: the outbox on PostgreSQL (the only outbox there is),
 * a business table written in the same transaction as each enqueue, and the inbox on PostgreSQL or SQLite
 * with an effects table its handlers write in the inbox's transaction.
 *
 * A harness is opened once per simulation and `reset` before every run (the schema's tables emptied, a
 * fresh SQLite database, a fresh clock and fresh message ids), so thousands of seeds reuse one schema and
 * one connection pool.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import type pg from 'pg';
import { ManualClock } from '../../src/core/clock.js';
import { createPostgresInboxStore } from '../../src/messaging/inbox/postgres.js';
import { createSqliteInboxStore } from '../../src/messaging/inbox/sqlite.js';
import type { InboxStore } from '../../src/messaging/inbox/store.js';
import { createOutbox, type Outbox } from '../../src/messaging/outbox/outbox.js';
import { openSimDatabase, persistently, SIM_EPOCH, SimulatedCrash } from './harness.js';

/** Every messaging simulation: the outbox on PostgreSQL, the inbox on PostgreSQL or on SQLite. */
export const MESSAGING_SIMS = ['messaging-postgres', 'messaging-sqlite'] as const;
export type MessagingSimName = (typeof MESSAGING_SIMS)[number];

/**
 * A defect planted on purpose, for the tests that show the simulation catches it:
 * - `inbox-forgets-id`: the inbox records each delivery under a fresh id instead of the message's id;
 * - `relay-new-id`: the relay publishes a message again under a new id instead of the one fixed at enqueue.
 */
export type MessagingDefect = 'inbox-forgets-id' | 'relay-new-id';

/** What a business transaction does after writing its order and enqueueing its message. */
export type EnqueueOutcome = 'commit' | 'rollback' | 'crash';

/** One order as the business transaction writes it, and the message it enqueues. */
export interface SimOrder {
  readonly no: number;
  /** The outbox ordering key. */
  readonly key: string;
  /** How the consumers' handlers treat it: `flaky` fails its first attempt, `poison` fails until fixed. */
  readonly kind: 'ok' | 'flaky' | 'poison';
}

/** An applied effect: what an inbox handler wrote, committed with the processed mark. */
export interface SimEffect {
  readonly consumer: string;
  readonly messageId: string;
}

export interface MessagingHarness {
  readonly name: MessagingSimName;
  readonly defect: MessagingDefect | undefined;
  /** The relay's, the outbox's and the inbox's clock. */
  readonly clock: ManualClock;
  readonly pool: pg.Pool;
  readonly outbox: Outbox;
  /** The real inbox store of the current run. */
  readonly inboxStore: InboxStore<unknown>;
  /** Empty tables, a fresh inbox store, clock and message ids (`…-000000000001`, …) for the next run. */
  reset(): Promise<void>;
  /**
   * The business transaction: writes the order, enqueues its message, then commits, rolls back, or dies
   * before COMMIT (its backend ended, as when the process is killed). Resolves with the message id the
   * outbox assigned; rejects when the database fails (the outcome is then read back with `committedOrders`).
   */
  enqueue(order: SimOrder, outcome: EnqueueOutcome): Promise<string>;
  /** The orders that committed, by number, with their message ids (the business table: the ground truth). */
  committedOrders(): Promise<Map<number, string>>;
  /** Inside an inbox handler: the effect of `messageId` for `consumer`, written through the handler's `tx`. */
  applyEffect(tx: unknown, consumer: string, messageId: string): Promise<void>;
  /** Inside an inbox handler: the consumer process dies with its transaction open. Always rejects. */
  dieInTransaction(tx: unknown): Promise<never>;
  /** Committed effects, of one (consumer, message id) or all. */
  effects(only?: SimEffect): Promise<SimEffect[]>;
  /** Pending (unsent, not dead-lettered) outbox rows. */
  outboxPending(): Promise<number>;
  /**
   * Waits until every pending outbox row is visible to a claim (its transaction below every snapshot's
   * xmin; another suite's open transaction on the shared server can hold rows back), so a relay step sees
   * what a run committed and runs replay alike.
   */
  untilClaimable(): Promise<void>;
  /** Ends the pool's server connections (relay, enqueue, and the PostgreSQL inbox); later calls must recover. */
  dropConnections(): Promise<void>;
  close(): Promise<void>;
}

/** Options of {@link openMessagingHarness}. */
export interface MessagingHarnessOptions {
  readonly defect?: MessagingDefect;
}

/** How long `untilClaimable` waits for another session's transaction to end, in milliseconds. */
const CLAIMABLE_WITHIN_MS = 120_000;

/** Message ids `00000000-0000-4000-8000-000000000001`, … (UUIDs, as the outbox requires). */
function messageIds(): () => string {
  let n = 0;
  return () => `00000000-0000-4000-8000-${(++n).toString(16).padStart(12, '0')}`;
}

/** Opens the harness of one messaging simulation. */
export async function openMessagingHarness(name: MessagingSimName, options: MessagingHarnessOptions = {}): Promise<MessagingHarness> {
  const database = await openSimDatabase('rs_msim');
  const { schema, pool } = database;
  const q = `"${schema}"`;
  await pool.query(`CREATE TABLE ${q}.sim_orders (no integer PRIMARY KEY, key text NOT NULL, message_id uuid NOT NULL);
    CREATE TABLE ${q}.sim_effects (consumer text NOT NULL, message_id text NOT NULL)`);
  const sqlite = name === 'messaging-sqlite';

  /** The SQLite inbox's database, with the effects table its handlers write. */
  const openSqlite = (): { database: Database; store: InboxStore<Database> } => {
    const database = new BetterSqlite3(':memory:');
    database.exec('CREATE TABLE sim_effects (consumer TEXT NOT NULL, message_id TEXT NOT NULL)');
    return { database, store: createSqliteInboxStore({ database }) };
  };

  class Harness implements MessagingHarness {
    readonly name = name;
    readonly defect = options.defect;
    readonly pool = pool;
    clock = new ManualClock(SIM_EPOCH);
    outbox = createOutbox({ schema, clock: this.clock, generateId: messageIds() });
    private sqlite = sqlite ? openSqlite() : undefined;
    private readonly pgInbox = createPostgresInboxStore({ pool, schema });

    get inboxStore(): InboxStore<unknown> {
      return this.sqlite?.store ?? this.pgInbox;
    }

    async reset(): Promise<void> {
      await persistently(() =>
        pool.query(`DELETE FROM ${q}.outbox; DELETE FROM ${q}.inbox_processed; DELETE FROM ${q}.inbox_attempts;
          DELETE FROM ${q}.sim_orders; DELETE FROM ${q}.sim_effects`),
      );
      if (this.sqlite) {
        this.sqlite.database.close();
        this.sqlite = openSqlite();
      }
      this.clock = new ManualClock(SIM_EPOCH);
      this.outbox = createOutbox({ schema, clock: this.clock, generateId: messageIds() });
    }

    async enqueue(order: SimOrder, outcome: EnqueueOutcome): Promise<string> {
      const client = await pool.connect();
      let broken: Error | undefined;
      const onError = (error: Error): void => {
        broken = error;
      };
      client.on('error', onError);
      try {
        await client.query('BEGIN');
        const id = await this.outbox.enqueue(client, { topic: 'orders', key: order.key, payload: JSON.stringify(order) });
        await client.query(`INSERT INTO ${q}.sim_orders (no, key, message_id) VALUES ($1, $2, $3)`, [order.no, order.key, id]);
        if (outcome === 'commit') await client.query('COMMIT');
        else if (outcome === 'rollback') await client.query('ROLLBACK');
        else {
          // The process dies before COMMIT: its backend goes away with the open transaction.
          broken = new SimulatedCrash('died before COMMIT');
          await client.query('SELECT pg_terminate_backend(pg_backend_pid())').catch(() => undefined);
        }
        return id;
      } catch (error) {
        broken ??= error instanceof Error ? error : new Error(String(error));
        throw error;
      } finally {
        client.removeListener('error', onError);
        client.release(broken);
      }
    }

    async committedOrders(): Promise<Map<number, string>> {
      const result = await persistently(() => pool.query<{ no: number; message_id: string }>(`SELECT no, message_id FROM ${q}.sim_orders`));
      return new Map(result.rows.map((row) => [row.no, row.message_id]));
    }

    async applyEffect(tx: unknown, consumer: string, messageId: string): Promise<void> {
      if (this.sqlite) {
        (tx as Database).prepare('INSERT INTO sim_effects (consumer, message_id) VALUES (?, ?)').run(consumer, messageId);
        return;
      }
      await (tx as pg.PoolClient).query(`INSERT INTO ${q}.sim_effects (consumer, message_id) VALUES ($1, $2)`, [consumer, messageId]);
    }

    async dieInTransaction(tx: unknown): Promise<never> {
      // SQLite lives in this process: its open transaction dies with it, which the store's rollback stands for.
      if (!this.sqlite) await (tx as pg.PoolClient).query('SELECT pg_terminate_backend(pg_backend_pid())');
      throw new SimulatedCrash('the consumer died inside its transaction');
    }

    async effects(only?: SimEffect): Promise<SimEffect[]> {
      type Row = { consumer: string; message_id: string };
      let rows: Row[];
      if (this.sqlite) {
        const sql = 'SELECT consumer, message_id FROM sim_effects';
        rows = (only === undefined
          ? this.sqlite.database.prepare(sql).all()
          : this.sqlite.database.prepare(`${sql} WHERE consumer = ? AND message_id = ?`).all(only.consumer, only.messageId)) as Row[];
      } else {
        const sql = `SELECT consumer, message_id FROM ${q}.sim_effects`;
        const values = only === undefined ? [] : [only.consumer, only.messageId];
        rows = (await persistently(() => pool.query<Row>(only === undefined ? sql : `${sql} WHERE consumer = $1 AND message_id = $2`, values))).rows;
      }
      return rows.map((row) => ({ consumer: row.consumer, messageId: row.message_id }));
    }

    async outboxPending(): Promise<number> {
      const result = await persistently(() => pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${q}.outbox WHERE status = 0`));
      return result.rows[0]?.n ?? 0;
    }

    async untilClaimable(): Promise<void> {
      const held = `SELECT count(*)::int AS n FROM ${q}.outbox WHERE status = 0 AND xid >= pg_snapshot_xmin(pg_current_snapshot())`;
      const deadline = Date.now() + CLAIMABLE_WITHIN_MS;
      for (let wait = 1; ; wait = Math.min(wait * 2, 50)) {
        const result = await persistently(() => pool.query<{ n: number }>(held));
        if (result.rows[0]?.n === 0) return;
        if (Date.now() > deadline) throw new Error(`outbox rows stayed invisible to claims for ${CLAIMABLE_WITHIN_MS} ms: a transaction elsewhere on the server holds the snapshot xmin back`);
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }

    dropConnections(): Promise<void> {
      return database.dropConnections();
    }

    async close(): Promise<void> {
      this.sqlite?.database.close();
      await database.close();
    }
  }
  return new Harness();
}
