/** The inbox on SQLite (better-sqlite3): the shared contract, on a file shared with the business table. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, createSqliteInboxStore, inboxProcessor } from '../../../src/messaging/inbox/index.js';
import { inboxContract } from './contract.js';
import { inboxBatchContract } from './batch-contract.js';
import { runBatchChild } from './batch-child.js';

describe('SQLite inbox', () => {
  let dir: string;
  let database: Database;
  let tables = 0;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'rs-inbox-'));
    database = new BetterSqlite3(join(dir, 'inbox.db'));
    database.pragma('journal_mode = WAL');
    database.exec('CREATE TABLE effects (consumer TEXT NOT NULL, message_id TEXT NOT NULL)');
  });

  afterAll(() => {
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  inboxContract('sqlite', () => {
    database.exec('DELETE FROM effects');
    tables += 1;
    return Promise.resolve({
      store: createSqliteInboxStore({ database, prefix: `inbox_${tables}` }),
      write: (tx: Database, consumer: string, messageId: string) => {
        tx.prepare('INSERT INTO effects (consumer, message_id) VALUES (?, ?)').run(consumer, messageId);
        return Promise.resolve();
      },
      count: (consumer: string, messageId: string) =>
        Promise.resolve(database.prepare('SELECT count(*) FROM effects WHERE consumer = ? AND message_id = ?').pluck().get(consumer, messageId) as number),
    });
  });

  inboxBatchContract('sqlite', () => {
    database.exec('DELETE FROM effects');
    tables += 1;
    const prefix = `inbox_${tables}`;
    return Promise.resolve({
      store: createSqliteInboxStore({ database, prefix }),
      write: (tx: Database, consumer: string, messageId: string) => {
        tx.prepare('INSERT INTO effects (consumer, message_id) VALUES (?, ?)').run(consumer, messageId);
        return Promise.resolve();
      },
      count: (consumer: string, messageId: string) =>
        Promise.resolve(database.prepare('SELECT count(*) FROM effects WHERE consumer = ? AND message_id = ?').pluck().get(consumer, messageId) as number),
      crash: (consumer: string, ids: readonly string[], crashAt: string) =>
        runBatchChild({ STORE: 'sqlite', SQLITE_PATH: join(dir, 'inbox.db'), PREFIX: prefix, CONSUMER: consumer, IDS: JSON.stringify(ids), CRASH_AT: crashAt, MAX_ATTEMPTS: '2' }),
    });
  });

  it('migrates idempotently and validates its options', () => {
    createSqliteInboxStore({ database, prefix: 'again' });
    createSqliteInboxStore({ database, prefix: 'again' });
    expect(database.prepare('SELECT version FROM again_migrations').pluck().all()).toEqual([1, 2]);
    expect(() => createSqliteInboxStore({ database, prefix: '1x' })).toThrow(/"prefix"/);
    expect(() => createSqliteInboxStore({ database, path: 'x.db' })).toThrow(/"path"/);
    const inbox = createInbox({ store: createSqliteInboxStore({ database, prefix: 'again' }) });
    expect(() => inboxProcessor(inbox, '', () => Promise.resolve())).toThrow(/"consumer"/);
    expect(() => inboxProcessor(inbox, 'c', 'not a function' as never)).toThrow(/"handler"/);
  });
});
