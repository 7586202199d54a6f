/**
 * The inbox stores the batched consumers are tested on, PostgreSQL (a schema of its own) and SQLite (a file
 * of its own), each with a business table `effects (consumer, message_id)` without a unique key, so a
 * message applied twice shows as two rows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import type pg from 'pg';
import { createInbox, createPostgresInboxStore, createSqliteInboxStore, inboxBatchProcessor, type BatchProcessor, type Inbox, type MessageHandler } from '../../../src/messaging/inbox/index.js';
import { createEffectsSchema } from '../../support/messaging.js';

export type BatchStoreKind = 'postgres' | 'sqlite';

/** What a batch test's handler does, and the inbox it runs in. */
export interface ProcessorOptions {
  readonly maxAttempts?: number;
  /** Ids whose handler throws (after writing its row, so the rollback is what keeps the count at 0). */
  readonly fails?: (id: string) => boolean;
  /** Counts the handler's runs per message id. */
  readonly runs?: Map<string, number>;
}

/** One test's inbox store (the same for every processor it makes) and the effects on its tables. */
export interface BatchEffects {
  /** `inboxBatchProcessor` for consumer `billing` on a new inbox over this test's tables. */
  processor(options?: ProcessorOptions): BatchProcessor;
  /** Effect rows of `id`. */
  count(id: string): Promise<number>;
  /** Ids of the dead letters of consumer `billing` among the messages this test's handlers ran (a PostgreSQL schema serves every test of a file). */
  deadLetters(): Promise<string[]>;
  /** Asks for a redrive of dead letter `id` of consumer `billing`. */
  redrive(id: string): Promise<boolean>;
  /** What a consumer in a child process needs to reach the same tables (`STORE`, `SCHEMA` or `SQLITE_PATH` and `SQLITE_PREFIX`). */
  readonly childEnv: Readonly<Record<string, string>>;
}

/** A store opened for one test file. */
export interface BatchStore {
  readonly kind: BatchStoreKind;
  /** Inbox tables for one test. */
  tables(): BatchEffects;
  close(): Promise<void>;
}

export async function openBatchStore(kind: BatchStoreKind): Promise<BatchStore> {
  return kind === 'postgres' ? openPostgres() : openSqlite();
}

function effects<Tx>(
  newInbox: (maxAttempts: number) => Inbox<Tx>,
  write: (tx: Tx, id: string) => Promise<void>,
  count: (id: string) => Promise<number>,
  childEnv: Record<string, string>,
): BatchEffects {
  let inbox: Inbox<Tx> | undefined;
  const handled = new Set<string>();
  return {
    processor({ maxAttempts = 5, fails = () => false, runs = new Map<string, number>() } = {}) {
      inbox = newInbox(maxAttempts);
      const handler: MessageHandler<Tx> = async (message, tx) => {
        const id = message.id ?? '';
        runs.set(id, (runs.get(id) ?? 0) + 1);
        handled.add(id);
        await write(tx, id);
        if (fails(id)) throw new Error(`handler of ${id} fails`);
      };
      return inboxBatchProcessor(inbox, 'billing', handler);
    },
    count,
    childEnv,
    async deadLetters() {
      return ((await inbox?.deadLetters({ consumer: 'billing' })) ?? []).map((letter) => letter.messageId).filter((id) => handled.has(id));
    },
    redrive: (id) => (inbox ?? newInbox(5)).redrive('billing', id),
  };
}

async function openPostgres(): Promise<BatchStore> {
  const db = await createEffectsSchema('rs_batch_consumer', 12);
  return {
    kind: 'postgres',
    tables: () => {
      const store = createPostgresInboxStore({ pool: db.pool, schema: db.schema });
      return effects<pg.PoolClient>(
        (maxAttempts) => createInbox({ store, maxAttempts, handlerTimeoutMs: 5_000 }),
        (tx, id) => db.write(tx, 'billing', id),
        (id) => db.count('billing', id),
        { STORE: 'postgres', SCHEMA: db.schema },
      );
    },
    close: () => db.drop(),
  };
}

function openSqlite(): Promise<BatchStore> {
  const dir = mkdtempSync(join(tmpdir(), 'rs-batch-consumer-'));
  const path = join(dir, 'inbox.db');
  const database: Database = new BetterSqlite3(path);
  database.pragma('journal_mode = WAL');
  database.exec('CREATE TABLE effects (consumer TEXT NOT NULL, message_id TEXT NOT NULL)');
  let tables = 0;
  return Promise.resolve({
    kind: 'sqlite',
    tables: () => {
      tables += 1;
      // One store per test: its operations take turns on the shared connection.
      const prefix = `inbox_${tables}`;
      const store = createSqliteInboxStore({ database, prefix });
      return effects<Database>(
        (maxAttempts) => createInbox({ store, maxAttempts, handlerTimeoutMs: 5_000 }),
        (tx, id) => {
          tx.prepare('INSERT INTO effects (consumer, message_id) VALUES (?, ?)').run('billing', id);
          return Promise.resolve();
        },
        (id) => Promise.resolve(database.prepare('SELECT count(*) FROM effects WHERE consumer = ? AND message_id = ?').pluck().get('billing', id) as number),
        { STORE: 'sqlite', SQLITE_PATH: path, SQLITE_PREFIX: prefix },
      );
    },
    close: () => {
      database.close();
      rmSync(dir, { recursive: true, force: true });
      return Promise.resolve();
    },
  });
}
