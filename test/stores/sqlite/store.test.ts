import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { StoreClosedError, StoreMisuseError } from '../../../src/core/errors.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { createReceiver } from '../../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';
import type { ClaimInput, TransactionView } from '../../../src/core/store.js';
import { storeContract } from '../contract.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const FP = 'f'.repeat(64);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'retrysafe-sqlite-'));
}

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'shared', key, fingerprint: FP, leaseMs: 60_000, retentionMs: 600_000, ...overrides };
}

function json(value: unknown): StoredResponse {
  return { status: 201, headers: { 'content-type': 'application/json' }, body: encoder.encode(JSON.stringify(value)) };
}

function countPayments(database: Database): number {
  return database.prepare('SELECT count(*) FROM payments').pluck().get() as number;
}

const PAYMENTS = 'CREATE TABLE IF NOT EXISTS payments (idempotency_key TEXT NOT NULL, note TEXT)';

storeContract('sqlite :memory:', () => {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createSqliteStore({ clock });
  return Promise.resolve({ store, clock, close: () => store.close() });
});

storeContract('sqlite file', () => {
  const dir = tempDir();
  const clock = new ManualClock(1_700_000_000_000);
  const store = createSqliteStore({ path: join(dir, 'records.db'), clock });
  return Promise.resolve({
    store,
    clock,
    close: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  });
});

describe('sqlite store: setup', () => {
  let dir: string;
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('offers waitFor and transaction, so the contract and transactional mode exercise them', async () => {
    const store = createSqliteStore();
    expect(await store.waitFor('shared', 'absent', 1)).toBeUndefined();
    expect(await store.transaction((db) => Promise.resolve(db.prepare('SELECT 1').pluck().get()))).toBe(1);
    await store.close();
  });

  it('opens a file in WAL mode and migrates it once, however many stores open it', async () => {
    const path = join(dir, 'a.db');
    const first = createSqliteStore({ path });
    const second = createSqliteStore({ path });
    expect(first.database.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(first.database.prepare('SELECT version, name FROM retrysafe_records_migrations').all()).toEqual([
      { version: 1, name: 'init' },
      { version: 2, name: 'abandoned_index' },
      { version: 3, name: 'fencing_token' },
      { version: 4, name: 'replay_text' },
    ]);
    const indexes = first.database.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'retrysafe_records'").pluck().all();
    expect(indexes).toContain('retrysafe_records_expires_at');
    expect(indexes).toContain('retrysafe_records_abandoned');
    await first.claim(input('k'));
    expect((await second.get('shared', 'k'))?.state).toBe('in_progress');
    await first.close();
    await second.close();
  });

  it('keeps stores with different tables apart', async () => {
    const database = new BetterSqlite3(':memory:');
    const a = createSqliteStore({ database, table: 'records_a' });
    const b = createSqliteStore({ database, table: 'records_b' });
    expect((await a.claim(input('k'))).acquired).toBe(true);
    expect((await b.claim(input('k'))).acquired).toBe(true);
    await a.close();
    await b.close();
    database.close();
  });

  it('refuses a schema migrated by a newer release', () => {
    const database = new BetterSqlite3(':memory:');
    createSqliteStore({ database });
    database.prepare('INSERT INTO retrysafe_records_migrations (version, name, applied_at) VALUES (99, ?, 0)').run('future');
    expect(() => createSqliteStore({ database })).toThrow(/version 99/);
    database.close();
  });

  it('leaves a caller-provided database open on close, and closes one it opened', async () => {
    const database = new BetterSqlite3(':memory:');
    const borrowed = createSqliteStore({ database });
    await borrowed.close();
    expect(database.open).toBe(true);
    await expect(borrowed.get('shared', 'k')).rejects.toThrow(/closed/);
    database.close();

    const owned = createSqliteStore({ path: join(dir, 'owned.db') });
    await owned.close();
    expect(owned.database.open).toBe(false);
  });

  it('finishes queued operations before closing', async () => {
    const store = createSqliteStore();
    const pending = Array.from({ length: 10 }, (_, i) => store.claim(input(`k${i}`)));
    await store.close();
    const results = await Promise.all(pending);
    expect(results.every((r) => r.acquired)).toBe(true);
  });

  it('validates options with a TypeError naming the option', () => {
    const database = new BetterSqlite3(':memory:');
    expect(() => createSqliteStore({ path: ':memory:', database })).toThrow(/"path"/);
    expect(() => createSqliteStore({ path: '' })).toThrow(/"path"/);
    expect(() => createSqliteStore({ database: {} as Database })).toThrow(/"database"/);
    expect(() => createSqliteStore({ table: 'records; DROP TABLE x' })).toThrow(/"table"/);
    expect(() => createSqliteStore({ table: '1records' })).toThrow(/"table"/);
    expect(() => createSqliteStore({ table: 'x'.repeat(49) })).toThrow(/"table"/);
    expect(() => createSqliteStore({ clock: {} as ManualClock })).toThrow(/"clock"/);
    expect(() => createSqliteStore({ generateId: 'id' as unknown as () => string })).toThrow(/"generateId"/);
    expect(() => createSqliteStore({ busyTimeoutMs: -1 })).toThrow(/"busyTimeoutMs"/);
    expect(() => createSqliteStore({ synchronous: 'off' as 'full' })).toThrow(/option "synchronous" must be 'normal' or 'full', got "off"/);
    expect(() => createSqliteStore({ database, synchronous: 2 as unknown as 'full' })).toThrow(TypeError);
    for (const bad of [() => createSqliteStore({ table: '' }), () => createSqliteStore({ busyTimeoutMs: 1.5 })]) {
      expect(bad).toThrow(TypeError);
    }
    database.close();
  });

  it('flushes commits as the synchronous option says: normal by default, full on request, a given connection untouched unless asked', async () => {
    const dir = tempDir();
    // PRAGMA synchronous: 1 = NORMAL, 2 = FULL.
    const level = (store: SqliteStore): unknown => store.database.pragma('synchronous', { simple: true });
    const byDefault = createSqliteStore({ path: join(dir, 'a.db') });
    expect(level(byDefault)).toBe(1);
    await byDefault.close();
    const full = createSqliteStore({ path: join(dir, 'a.db'), synchronous: 'full' });
    expect(level(full)).toBe(2);
    // A claim and a completion still work, and the setting did not change what the file holds.
    const claimed = await full.claim(input('k'));
    if (!claimed.acquired) throw new Error('expected to acquire');
    expect(await full.complete(claimed.claim, json({ ok: true }), 600_000)).toBe(true);
    await full.close();
    const existing = createSqliteStore({ path: join(dir, 'a.db'), migrate: false, synchronous: 'full' });
    expect(level(existing)).toBe(2);
    expect((await existing.get('shared', 'k'))?.state).toBe('completed');
    await existing.close();
    const database = new BetterSqlite3(join(dir, 'b.db'));
    database.pragma('synchronous = OFF');
    const adopted = createSqliteStore({ database });
    expect(level(adopted)).toBe(0);
    await adopted.close();
    const asked = createSqliteStore({ database, synchronous: 'normal' });
    expect(level(asked)).toBe(1);
    await asked.close();
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('rejects a reap limit that is not a positive integer', async () => {
    const store = createSqliteStore();
    await expect(store.reap(0)).rejects.toThrow(TypeError);
    await expect(store.reap(Number.NaN)).rejects.toThrow(TypeError);
    await store.close();
  });

  it('uses the injected id generator for fencing tokens', async () => {
    let n = 0;
    const store = createSqliteStore({ generateId: () => `token-${++n}` });
    const result = await store.claim(input('k'));
    expect(result.acquired && result.claim.leaseToken).toBe('token-1');
    await store.close();
  });
});

describe('sqlite store: transactional mode', () => {
  let store: SqliteStore;
  beforeEach(() => {
    store = createSqliteStore();
    store.database.exec(PAYMENTS);
  });
  afterEach(async () => {
    await store.close();
  });

  it('commits the business row and the saved response together, and replays without running again', async () => {
    const receiver = createReceiver({ store, transactional: true });
    let runs = 0;
    const work = ({ tx }: { tx: Database }): Promise<StoredResponse> => {
      runs++;
      tx.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('pay-1');
      return Promise.resolve(json({ paid: 100 }));
    };
    const id = { scope: 'shared', key: 'pay-1', fingerprint: FP };
    const first = await receiver.execute(id, work);
    expect(first).toMatchObject({ replayed: false, saved: true });
    expect(countPayments(store.database)).toBe(1);
    expect((await store.get('shared', 'pay-1'))?.state).toBe('completed');
    expect(store.database.inTransaction).toBe(false);

    const second = await receiver.execute(id, work);
    expect(second.replayed).toBe(true);
    expect(decoder.decode(second.response.body)).toBe('{"paid":100}');
    expect(runs).toBe(1);
    expect(countPayments(store.database)).toBe(1);
  });

  it('rolls back the business row and the claim together when the work throws, and a retry runs', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = { scope: 'shared', key: 'pay-2', fingerprint: FP };
    await expect(
      receiver.execute(id, ({ tx }) => {
        tx.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('pay-2');
        return Promise.reject(new Error('card declined by a bug'));
      }),
    ).rejects.toThrow('card declined by a bug');
    expect(countPayments(store.database)).toBe(0);
    expect(await store.get('shared', 'pay-2')).toBeUndefined();
    expect(store.database.inTransaction).toBe(false);

    const retry = await receiver.execute(id, ({ tx }) => {
      tx.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('pay-2');
      return Promise.resolve(json({ paid: 1 }));
    });
    expect(retry.replayed).toBe(false);
    expect(countPayments(store.database)).toBe(1);
  });

  it('rolls back the business row on a 5xx and frees the key', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = { scope: 'shared', key: 'pay-3', fingerprint: FP };
    const execution = await receiver.execute(id, ({ tx }) => {
      tx.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('pay-3');
      return Promise.resolve({ status: 503, headers: {}, body: new Uint8Array() });
    });
    expect(execution).toMatchObject({ replayed: false, saved: false });
    expect(execution.response.status).toBe(503);
    expect(countPayments(store.database)).toBe(0);
    expect(await store.get('shared', 'pay-3')).toBeUndefined();
  });

  it('runs 20 concurrent executions of 5 keys exactly once per key, each caller getting its key’s response', async () => {
    const receiver = createReceiver({ store, transactional: true });
    let runs = 0;
    const executions = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const key = `order-${i % 5}`;
        const execution = await receiver.execute({ scope: 'shared', key, fingerprint: FP }, async ({ tx }) => {
          runs++;
          tx.prepare('INSERT INTO payments (idempotency_key, note) VALUES (?, ?)').run(key, 'before await');
          await new Promise((resolve) => setTimeout(resolve, 5));
          return json({ key, nonce: randomUUID() });
        });
        return { key, execution };
      }),
    );
    expect(runs).toBe(5);
    expect(countPayments(store.database)).toBe(5);
    const distinct = store.database.prepare('SELECT count(DISTINCT idempotency_key) FROM payments').pluck().get();
    expect(distinct).toBe(5);
    for (let k = 0; k < 5; k++) {
      const forKey = executions.filter((e) => e.key === `order-${k}`);
      const bodies = new Set(forKey.map((e) => decoder.decode(e.execution.response.body)));
      expect(bodies.size).toBe(1);
      expect(forKey.filter((e) => !e.execution.replayed)).toHaveLength(1);
    }
  });

  it('makes a plain claim wait for an open transaction instead of landing inside it', async () => {
    let enter!: () => void;
    let finish!: () => void;
    const entered = new Promise<void>((resolve) => (enter = resolve));
    const gate = new Promise<void>((resolve) => (finish = resolve));
    const transaction = store.claimTransaction(input('inside'), async (db) => {
      db.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('inside');
      enter();
      await gate;
      throw new Error('roll it back');
    });
    await entered;
    let plainSettled = false;
    const plain = store.claim(input('outside')).then((result) => {
      plainSettled = true;
      return result;
    });
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(plainSettled).toBe(false);
    finish();
    await expect(transaction).rejects.toThrow('roll it back');
    expect((await plain).acquired).toBe(true);
    expect((await store.get('shared', 'outside'))?.state).toBe('in_progress');
    expect(await store.get('shared', 'inside')).toBeUndefined();
    expect(countPayments(store.database)).toBe(0);
    expect(store.database.inTransaction).toBe(false);
  });

  it('queues concurrent transactions one after another and recovers from a rejected one', async () => {
    const events: string[] = [];
    const run = (name: string, fail: boolean) =>
      store.transaction(async (db) => {
        events.push(`${name} start`);
        db.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run(name);
        await new Promise((resolve) => setTimeout(resolve, 10));
        events.push(`${name} end`);
        if (fail) throw new Error(`${name} failed`);
        return name;
      });
    const outcomes = await Promise.allSettled([run('a', false), run('b', true), run('c', false)]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(events).toEqual(['a start', 'a end', 'b start', 'b end', 'c start', 'c end']);
    expect(store.database.prepare('SELECT idempotency_key FROM payments ORDER BY rowid').pluck().all()).toEqual(['a', 'c']);
    expect(await store.transaction(() => Promise.resolve('still usable'))).toBe('still usable');
  });

  it('refuses, rather than deadlocks, a call to the store itself from inside its transaction', async () => {
    await expect(store.transaction(() => store.get('shared', 'k'))).rejects.toThrow(/inside its own transaction/);
    await expect(store.transaction(() => store.get('shared', 'k'))).rejects.toBeInstanceOf(StoreMisuseError);
    await expect(store.transaction(() => store.transaction(() => Promise.resolve(1)))).rejects.toThrow(/inside its own transaction/);
    expect(store.database.inTransaction).toBe(false);
  });

  it("tells its own open transaction from another store's, when the two nest", async () => {
    const other = createSqliteStore({ path: ':memory:' });
    try {
      const inner = await store.transaction(() =>
        other.transaction(async () => {
          // Inside other's transaction, nested in store's: both stores must refuse, neither may deadlock.
          await expect(store.get('shared', 'k')).rejects.toBeInstanceOf(StoreMisuseError);
          await expect(other.get('shared', 'k')).rejects.toBeInstanceOf(StoreMisuseError);
          return 'nested';
        }),
      );
      expect(inner).toBe('nested');
      // Inside store's transaction only, the other store is free to use.
      expect(await store.transaction(() => other.get('shared', 'k'))).toBeUndefined();
    } finally {
      await other.close();
    }
  });

  it('commits a checkpoint made through the transaction view with the transaction, and undoes it on rollback', async () => {
    const held = await store.claim(input('phased'));
    if (!held.acquired) throw new Error('expected to acquire');
    await expect(
      store.transaction(async (_db, tx) => {
        expect((await tx.checkpoint?.(held.claim, 'rolled-back', 1_000))?.recoveryPoint).toBe('rolled-back');
        throw new Error('undo');
      }),
    ).rejects.toThrow('undo');
    expect((await store.get('shared', 'phased'))?.recoveryPoint).toBeUndefined();
    await store.transaction(async (_db, tx) => {
      await tx.checkpoint?.(held.claim, 'kept', 1_000);
    });
    expect((await store.get('shared', 'phased'))?.recoveryPoint).toBe('kept');
  });

  it('refuses the transaction view once the transaction has ended', async () => {
    const held = await store.claim(input('late'));
    if (!held.acquired) throw new Error('expected to acquire');
    let leaked: TransactionView | undefined;
    await store.transaction((_db, tx) => {
      leaked = tx;
      return Promise.resolve();
    });
    await expect(leaked?.release(held.claim)).rejects.toThrow(/already ended/);
    await expect(leaked?.checkpoint(held.claim, 'late', 1_000)).rejects.toBeInstanceOf(StoreMisuseError);
  });

  it('refuses every call after close with a StoreClosedError', async () => {
    const closing = createSqliteStore({ path: ':memory:' });
    await closing.close();
    await expect(closing.claim(input('after'))).rejects.toBeInstanceOf(StoreClosedError);
    await expect(closing.get('shared', 'after')).rejects.toThrow('the SQLite store is closed');
  });

  it('keeps a started waitFor within its timeout while a transaction holds the store', async () => {
    const held = await store.claim(input('k'));
    expect(held.acquired).toBe(true);
    const started = performance.now();
    const waiting = store.waitFor('shared', 'k', 100);
    await new Promise((resolve) => setTimeout(resolve, 10));
    // The transaction holds the store ten times the wait's timeout: a wait stuck behind it would show.
    const transaction = store.transaction(() => new Promise<void>((resolve) => setTimeout(resolve, 1_000)));
    const record = await waiting;
    expect(performance.now() - started).toBeLessThan(700);
    expect(record?.state).toBe('in_progress');
    await transaction;
  });

  it('wakes waiters only after COMMIT, never for a completion that was rolled back', async () => {
    const held = await store.claim(input('k'));
    if (!held.acquired) throw new Error('expected to acquire');
    const rolledBack = store.waitFor('shared', 'k', 150);
    await expect(
      store.transaction(async (_db, tx) => {
        expect(await tx.complete(held.claim, json({ n: 1 }), 600_000)).toBe(true);
        throw new Error('undo');
      }),
    ).rejects.toThrow('undo');
    expect((await rolledBack)?.state).toBe('in_progress');

    const committed = store.waitFor('shared', 'k', 5_000);
    await store.transaction(async (_db, tx) => {
      await tx.complete(held.claim, json({ n: 2 }), 600_000);
    });
    const record = await committed;
    expect(record?.state).toBe('completed');
    expect(decoder.decode(record?.response?.body)).toBe('{"n":2}');
  });
});

interface Child {
  readonly process: ChildProcessWithoutNullStreams;
  /** Resolves with the next stdout line. */
  line(): Promise<string>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Children still running, so a failed test does not leave a process holding the file. */
const running = new Set<ChildProcessWithoutNullStreams>();

function startChild(command: string, path: string, key: string): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, command, path, key], { cwd: ROOT });
  const lines: string[] = [];
  const readers: ((line: string) => void)[] = [];
  let buffered = '';
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      const reader = readers.shift();
      if (reader) reader(line);
      else lines.push(line);
    }
  });
  running.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
    }),
  );
  return {
    process: child,
    exited,
    line: () => {
      const next = lines.shift();
      if (next !== undefined) return Promise.resolve(next);
      return new Promise<string>((resolve, reject) => {
        readers.push(resolve);
        void exited.then(({ code }) => reject(new Error(`child exited (${String(code)}) before printing: ${stderr}`)));
      });
    },
  };
}

describe('sqlite store: several processes on one file', () => {
  let dir: string;
  let path: string;
  beforeEach(() => {
    dir = tempDir();
    path = join(dir, 'shared.db');
  });
  afterEach(() => {
    for (const child of running) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('lets a second process see the first process’s claim, and this one see the second’s', async () => {
    const store = createSqliteStore({ path });
    const mine = await store.claim(input('parent-key'));
    if (!mine.acquired) throw new Error('expected to acquire');

    const refused = startChild('claim', path, 'parent-key');
    expect(JSON.parse(await refused.line())).toEqual({ acquired: false, leaseToken: mine.claim.leaseToken });
    expect((await refused.exited).code).toBe(0);

    const winner = startChild('claim', path, 'child-key');
    const theirs = JSON.parse(await winner.line()) as { acquired: boolean; leaseToken: string };
    expect(theirs.acquired).toBe(true);
    expect((await winner.exited).code).toBe(0);
    const record = await store.get('shared', 'child-key');
    expect(record?.leaseToken).toBe(theirs.leaseToken);
    expect((await store.claim(input('child-key'))).acquired).toBe(false);
    await store.close();
  });

  it('gives exactly one of four processes racing for one key the lease', async () => {
    createSqliteStore({ path }).database.close();
    const children = Array.from({ length: 4 }, () => startChild('claim', path, 'raced'));
    const answers = await Promise.all(children.map(async (child) => JSON.parse(await child.line()) as { acquired: boolean; leaseToken: string }));
    await Promise.all(children.map((child) => child.exited));
    expect(answers.filter((a) => a.acquired)).toHaveLength(1);
    expect(new Set(answers.map((a) => a.leaseToken)).size).toBe(1);
    const store = createSqliteStore({ path });
    expect((await store.get('shared', 'raced'))?.leaseToken).toBe(answers[0]?.leaseToken);
    await store.close();
  });

  it('sees through waitFor a completion made by another process', async () => {
    const store = createSqliteStore({ path });
    const child = startChild('complete-later', path, 'slow');
    expect(await child.line()).toBe('claimed');
    const record = await store.waitFor('shared', 'slow', 10_000);
    expect(record?.state).toBe('completed');
    expect(decoder.decode(record?.response?.body)).toBe('from child');
    expect(await child.line()).toBe('completed');
    await child.exited;
    await store.close();
  });

  it('leaves neither the business row nor the record after a SIGKILL before COMMIT; the retry runs once', async () => {
    const setup = createSqliteStore({ path });
    setup.database.exec(PAYMENTS);
    await setup.close();

    const child = startChild('crash-in-transaction', path, 'crash-1');
    expect(await child.line()).toBe('inserted');
    // WAL lets a reader look while the child holds its write transaction open: nothing is visible yet.
    const reader = new BetterSqlite3(path, { readonly: true });
    expect(countPayments(reader)).toBe(0);
    expect(reader.prepare('SELECT count(*) FROM retrysafe_records').pluck().get()).toBe(0);
    reader.close();
    child.process.kill('SIGKILL');
    expect((await child.exited).signal).toBe('SIGKILL');

    const store = createSqliteStore({ path });
    expect(countPayments(store.database)).toBe(0);
    expect(await store.get('shared', 'crash-1')).toBeUndefined();

    const receiver = createReceiver({ store, transactional: true });
    let runs = 0;
    const id = { scope: 'shared', key: 'crash-1', fingerprint: FP };
    const work = ({ tx }: { tx: Database }): Promise<StoredResponse> => {
      runs++;
      tx.prepare('INSERT INTO payments (idempotency_key) VALUES (?)').run('crash-1');
      return Promise.resolve(json({ ok: true }));
    };
    expect((await receiver.execute(id, work)).replayed).toBe(false);
    expect((await receiver.execute(id, work)).replayed).toBe(true);
    expect(runs).toBe(1);
    expect(countPayments(store.database)).toBe(1);
    await store.close();
  });
});
