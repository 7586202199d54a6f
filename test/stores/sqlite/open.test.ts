/**
 * The SQLite kit's one open-and-migrate routine, which the idempotency store, the inbox store and the
 * session store each call with their own steps and ledger: what it records and with which clock, what it
 * refuses, what it cleans up; and a file written before the routine existed (fixtures/stores-e55ae13.sqlite:
 * the three stores' default tables with a little data, made by retrysafe at commit e55ae13, when each
 * store had its own routine) opens unchanged under all three.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createInbox, createSqliteInboxStore } from '../../../src/messaging/inbox/index.js';
import { createSessionReceiver, createSqliteSessionStore } from '../../../src/sessions/index.js';
import { createSqliteStore } from '../../../src/stores/sqlite/index.js';
import { recordsSchema } from '../../../src/stores/sqlite/migrations.js';
import { migrateSqlite, openSqlite, type SqliteSchema } from '../../../src/stores/sqlite/open.js';

const BEFORE = fileURLToPath(new URL('./fixtures/stores-e55ae13.sqlite', import.meta.url));

/** A schema of two steps over the table `t`, its ledger recording `ledgerColumns`. */
function schema(ledgerColumns: SqliteSchema['ledgerColumns'], steps = 2): SqliteSchema {
  return {
    table: 't',
    ledger: 't_migrations',
    ledgerColumns,
    steps: [
      { version: 1, name: 'init', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' },
      { version: 2, name: 'note', sql: 'ALTER TABLE t ADD COLUMN note TEXT' },
    ].slice(0, steps),
  };
}

/** Every object of the file, its SQL with whitespace runs (and those inside parentheses) made one. */
function objects(database: Database): { type: string; name: string; sql: string | null }[] {
  return (database.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY type, name').all() as { type: string; name: string; sql: string | null }[]).map(
    (row) => ({ ...row, sql: row.sql?.replace(/\s+/g, ' ').replace(/\( /g, '(').replace(/ \)/g, ')') ?? null }),
  );
}

/** The names of `table`'s columns, in order. */
function columnsOf(database: Database, table: string): string[] {
  return (database.pragma(`table_info(${table})`) as { name: string }[]).map((column) => column.name);
}

/**
 * `rows` once the inbox's step 2 ran: its attempts table's column `replay_requested_at` is
 * `redrive_requested_at` (SQLite rewrites the table's SQL on `RENAME COLUMN`).
 */
function withRedriveColumn(rows: { type: string; name: string; sql: string | null }[]): { type: string; name: string; sql: string | null }[] {
  return rows.map((row) => (row.name === 'retrysafe_inbox_attempts' ? { ...row, sql: row.sql?.replace('replay_requested_at', 'redrive_requested_at') ?? null } : row));
}

/**
 * The objects of the file at `path` (the fixture) once the record table's steps 3 (the fencing token: a
 * column, the counter table and its triggers) and 4 (the replay text column), released after the fixture
 * was written, ran on it: those steps' SQL applied to a copy, nothing else.
 */
function withFencingStep(path: string): { type: string; name: string; sql: string | null }[] {
  const copy = `${path}.fencing`;
  copyFileSync(path, copy);
  const database = new BetterSqlite3(copy);
  try {
    for (const name of ['fencing_token', 'replay_text']) {
      database.exec(recordsSchema('retrysafe_records').steps.find((step) => step.name === name)?.sql ?? '');
    }
    return objects(database);
  } finally {
    database.close();
  }
}

/** The inbox's ledger once its step 2 (`redrive_requested_at`) ran. */
const INBOX_LEDGER = [{ version: 1 }, { version: 2 }];

const LEDGERS = ['retrysafe_records_migrations', 'retrysafe_inbox_migrations', 'retrysafe_sessions_migrations'];

function ledgers(database: Database): Record<string, unknown[]> {
  return Object.fromEntries(LEDGERS.map((ledger) => [ledger, database.prepare(`SELECT * FROM ${ledger} ORDER BY version`).all()]));
}

describe('openSqlite and migrateSqlite', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-open-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it.each<[SqliteSchema['ledgerColumns'], string[]]>([
    [[], ['version']],
    [['applied_at'], ['version', 'applied_at']],
    [['name', 'applied_at'], ['version', 'name', 'applied_at']],
  ])('applies each step once, in order, recording %j at the injected clock', (ledgerColumns, columns) => {
    const database = new BetterSqlite3(':memory:');
    const clock = new ManualClock(1_700_000_000_000);
    migrateSqlite(database, schema(ledgerColumns, 1), clock);
    clock.advance(5);
    migrateSqlite(database, schema(ledgerColumns), clock);
    migrateSqlite(database, schema(ledgerColumns), clock);
    expect(columnsOf(database, 't_migrations')).toEqual(columns);
    const recorded = { name: ['init', 'note'], applied_at: [1_700_000_000_000, 1_700_000_000_005] };
    expect(database.prepare('SELECT * FROM t_migrations ORDER BY version').all()).toEqual(
      [1, 2].map((version, at) => ({ version, ...Object.fromEntries(ledgerColumns.map((column) => [column, recorded[column][at]])) })),
    );
    expect(columnsOf(database, 't')).toEqual(['id', 'note']);
    database.close();
  });

  it('reads the ledger right on a connection that returns BigInts, applying nothing twice', () => {
    const database = new BetterSqlite3(':memory:').defaultSafeIntegers(true);
    migrateSqlite(database, schema([]), new ManualClock(0));
    expect(() => migrateSqlite(database, schema([]), new ManualClock(0))).not.toThrow();
    database.close();
  });

  it('refuses a ledger a newer release wrote, applying nothing', () => {
    const database = new BetterSqlite3(':memory:');
    migrateSqlite(database, schema([], 1), new ManualClock(0));
    database.prepare('INSERT INTO t_migrations (version) VALUES (3)').run();
    expect(() => migrateSqlite(database, schema([]), new ManualClock(0))).toThrow(
      'retrysafe: table "t" was migrated to version 3 by a newer retrysafe; this release knows up to 2',
    );
    expect(columnsOf(database, 't')).toEqual(['id']);
    database.close();
  });

  it('opens a file in WAL mode with the busy timeout, and closes it again when migrating or building the store throws', () => {
    const path = join(dir, 'a.db');
    const opening = { source: { path }, busyTimeoutMs: 1_234, migrate: true, schema: schema([]), clock: new ManualClock(0) };
    const database = openSqlite(opening, (db, owned) => {
      expect(owned).toBe(true);
      return db;
    });
    expect(database.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(database.pragma('busy_timeout', { simple: true })).toBe(1_234);
    database.prepare('INSERT INTO t_migrations (version) VALUES (9)').run();
    database.close();

    let opened: Database | undefined;
    expect(() => openSqlite(opening, (db) => (opened = db))).toThrow(/version 9/);
    expect(opened).toBeUndefined();
    expect(() =>
      openSqlite({ ...opening, schema: schema([], 1) }, (db) => {
        opened = db;
        throw new Error('prepare failed');
      }),
    ).toThrow(/version 9/);
    const failing = { ...opening, source: { path: join(dir, 'b.db') } };
    expect(() =>
      openSqlite(failing, (db) => {
        opened = db;
        throw new Error('prepare failed');
      }),
    ).toThrow('prepare failed');
    expect(opened?.open).toBe(false);
  });

  it('leaves a given connection open, in its own journal mode, when opening fails', () => {
    const database = new BetterSqlite3(join(dir, 'given.db'));
    expect(() =>
      openSqlite({ source: { database }, busyTimeoutMs: undefined, migrate: true, schema: schema([]), clock: new ManualClock(0) }, () => {
        throw new Error('prepare failed');
      }),
    ).toThrow('prepare failed');
    expect(database.open).toBe(true);
    expect(database.pragma('journal_mode', { simple: true })).toBe('delete');
    database.close();
  });

  it('without migrating, opens only an existing file that has the table, and creates nothing', () => {
    const opening = { busyTimeoutMs: undefined, migrate: false, schema: schema([]), clock: new ManualClock(0) };
    const path = join(dir, 'existing.db');
    expect(() => openSqlite({ ...opening, source: { path } }, (db) => db)).toThrow(/unable to open|does not exist|SQLITE_CANTOPEN/i);
    new BetterSqlite3(path).close();
    expect(() => openSqlite({ ...opening, source: { path } }, (db) => db)).toThrow(
      /table "t" does not exist in .*existing\.db; open the store once with migrations on/,
    );
    const check = new BetterSqlite3(path);
    expect(check.prepare('SELECT count(*) FROM sqlite_master').pluck().get()).toBe(0);
    check.close();
  });
});

describe('a file the three SQLite stores wrote before they shared one routine', () => {
  let dir: string;
  let path: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-open-'));
    path = join(dir, 'stores.db');
    copyFileSync(BEFORE, path);
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('opens unchanged under the idempotency, inbox and session stores, which read what they wrote', async () => {
    const reader = new BetterSqlite3(path, { readonly: true });
    const schemaBefore = objects(reader);
    const schemaAfter = withRedriveColumn(withFencingStep(path));
    const ledgersBefore = ledgers(reader);
    reader.close();
    expect(ledgersBefore).toEqual({
      retrysafe_records_migrations: [
        { version: 1, name: 'init', applied_at: 1_700_000_000_000 },
        { version: 2, name: 'abandoned_index', applied_at: 1_700_000_000_000 },
      ],
      retrysafe_inbox_migrations: [{ version: 1 }],
      retrysafe_sessions_migrations: [{ version: 1, applied_at: expect.any(Number) as number }],
    });

    const clock = new ManualClock(1_700_000_001_000);
    const records = createSqliteStore({ path, clock });
    const inboxStore = createSqliteInboxStore({ path });
    const sessions = createSqliteSessionStore({ path, clock });
    try {
      expect(await records.get('shared', 'done')).toMatchObject({ state: 'completed', response: { status: 201 } });
      expect(await records.get('shared', 'open')).toMatchObject({ state: 'in_progress' });
      const inbox = createInbox({ store: inboxStore, clock });
      expect(await inbox.handle({ consumer: 'billing', messageId: 'm-1' }, () => Promise.resolve())).toEqual({ status: 'duplicate' });
      expect(await inbox.deadLetters()).toMatchObject([{ consumer: 'billing', messageId: 'm-2', error: 'Error: boom', headers: { h: 'v' } }]);
      const receiver = createSessionReceiver({ store: sessions, clock });
      expect(await receiver.stats('client-1')).toMatchObject({ state: 'live', storedResponses: 1 });
    } finally {
      await records.close();
      await inboxStore.close();
      await sessions.close();
    }

    // Nothing else changed: only the inbox's step 2 and the records' steps 3 and 4, released after this
    // file was written, ran.
    const after = new BetterSqlite3(path, { readonly: true });
    expect(schemaAfter).not.toEqual(withRedriveColumn(schemaBefore));
    expect(objects(after)).toEqual(schemaAfter);
    expect(ledgers(after)).toEqual({
      ...ledgersBefore,
      retrysafe_records_migrations: [
        ...ledgersBefore['retrysafe_records_migrations'] ?? [],
        { version: 3, name: 'fencing_token', applied_at: 1_700_000_001_000 },
        { version: 4, name: 'replay_text', applied_at: 1_700_000_001_000 },
      ],
      retrysafe_inbox_migrations: INBOX_LEDGER,
    });
    after.close();
  });

  it('is what the stores create in a new file today, object for object', async () => {
    const fresh = join(dir, 'fresh.db');
    const clock = new ManualClock(0);
    await createSqliteStore({ path: fresh, clock }).close();
    await createSqliteInboxStore({ path: fresh }).close();
    await createSqliteSessionStore({ path: fresh, clock }).close();
    const now = new BetterSqlite3(fresh, { readonly: true });
    expect(objects(now)).toEqual(withRedriveColumn(withFencingStep(path)));
    expect(ledgers(now)).toEqual({
      retrysafe_records_migrations: [
        { version: 1, name: 'init', applied_at: 0 },
        { version: 2, name: 'abandoned_index', applied_at: 0 },
        { version: 3, name: 'fencing_token', applied_at: 0 },
        { version: 4, name: 'replay_text', applied_at: 0 },
      ],
      retrysafe_inbox_migrations: INBOX_LEDGER,
      // The session store's ledger reads the injected clock too (it read Date.now() before).
      retrysafe_sessions_migrations: [{ version: 1, applied_at: 0 }],
    });
    now.close();
  });
});
