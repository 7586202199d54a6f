/**
 * Fencing carried into the business write, on the SQL stores: a holder (a child process running the key
 * through a receiver) claims it on PostgreSQL or SQLite and is SIGSTOPped past its lease; another claim
 * takes the key over and its writes land; resumed, the old holder's writes with the token its handler was
 * given — a fenced update in SQLite (and PostgreSQL), an HTTP call with the Fencing-Token header — are
 * refused, and so is its completion. The etcd store runs the same in test/stores/etcd/fencing.test.ts.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { fencingHeaders } from '../../src/core/record.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createPostgresStore, fencedUpdate as pgFencedUpdate } from '../../src/stores/postgres/index.js';
import { createSqliteStore, fencedUpdate as sqliteFencedUpdate } from '../../src/stores/sqlite/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { POSTGRES_URL } from '../support/services.js';
import { fencedDownstream } from '../support/fenced-downstream.js';

const HOLDER = fileURLToPath(new URL('./fixtures/fenced-holder.ts', import.meta.url));
const INPUT = { scope: 's', key: 'k', fingerprint: 'f'.repeat(64), leaseMs: 60_000, retentionMs: 60_000 };

const dir = mkdtempSync(join(tmpdir(), 'retrysafe-sql-fence-'));
const postgres = await postgresAvailable();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The lines `child` prints, the n-th as a promise (rejected when it exits first). */
function linesOf(child: ChildProcessByStdio<Writable, Readable, null>): (n: number) => Promise<string> {
  const lines: string[] = [];
  let partial = '';
  const waiting = new Set<() => void>();
  child.stdout.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts.filter(Boolean));
    for (const check of waiting) check();
  });
  return (n) =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        if (lines.length > n) resolve(lines[n] as string);
      };
      waiting.add(check);
      child.once('exit', (code) => (lines.length > n ? undefined : reject(new Error(`the holder exited (${String(code)}) after ${lines.length} lines`))));
      check();
    });
}

/** What a case runs on: the holder's store arguments, and the parent's store on a clock past the holder's lease. */
interface Case {
  readonly holderArgs: string[];
  readonly takeoverStore: (clock: ManualClock) => IdempotencyStore;
  /** The PostgreSQL schema whose `accounts` row is fenced too (PostgreSQL case only). */
  readonly db?: TestSchema;
}

async function pausedHolderIsFenced(setup: Case): Promise<void> {
  const { db } = setup;
  const accountsPath = join(dir, `accounts-${db === undefined ? 'sqlite' : 'pg'}.db`);
  const accounts = new BetterSqlite3(accountsPath);
  accounts.exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, holder TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0); INSERT INTO accounts (id, holder) VALUES (1, 'nobody')`);
  if (db !== undefined) {
    await db.pool.query(`CREATE TABLE "${db.schema}".accounts (id int PRIMARY KEY, holder text NOT NULL, fence bigint NOT NULL DEFAULT 0)`);
    await db.pool.query(`INSERT INTO "${db.schema}".accounts (id, holder) VALUES (1, 'nobody')`);
  }
  const downstream = await fencedDownstream();
  const child = spawn(process.execPath, ['--import', 'tsx', HOLDER, ...setup.holderArgs, accountsPath, downstream.url], { stdio: ['pipe', 'pipe', 'inherit'] });
  const line = linesOf(child);
  try {
    const oldToken = (await line(0)).replace('claimed ', '');
    const store = setup.takeoverStore(new ManualClock(Date.now() + 10_000));
    expect(oldToken).toMatch(/^\d+$/);
    // Paused mid-work, as a GC pause or a stalled VM would: it holds a claim it no longer owns once the lease ends.
    expect(child.kill('SIGSTOP')).toBe(true);

    // Another node, its clock past the holder's lease, takes the key over and writes with its larger token.
    const takeover = await store.claim(INPUT);
    if (!takeover.acquired) throw new Error('expected the takeover to win');
    const newToken = takeover.claim.fencingToken ?? '';
    expect(takeover.claim.takeover).toBe(true);
    expect(BigInt(newToken)).toBeGreaterThan(BigInt(oldToken));
    const update = { table: 'accounts', id: 1, set: { holder: 'new holder' }, fencingToken: newToken };
    if (db !== undefined) expect(await pgFencedUpdate(db.pool, { ...update, table: `${db.schema}.accounts` })).toBe(true);
    expect(sqliteFencedUpdate(accounts, update)).toBe(true);
    expect((await fetch(downstream.url, { method: 'POST', headers: fencingHeaders(takeover.claim), body: 'new holder' })).status).toBe(204);

    // Resumed: its handler goes on with the token it was given.
    child.stdin.end('go\n');
    expect(child.kill('SIGCONT')).toBe(true);
    const outcome = JSON.parse(await line(1)) as Record<string, unknown>;
    expect(outcome).toEqual({ ...(db !== undefined && { postgres: false }), sqlite: false, http: 409, outcome: 'LeaseLostError' });
    if (db !== undefined) {
      expect((await db.pool.query(`SELECT holder, fence::text FROM "${db.schema}".accounts`)).rows).toEqual([{ holder: 'new holder', fence: newToken }]);
    }
    expect(accounts.prepare('SELECT holder, fence FROM accounts').safeIntegers(true).get()).toEqual({ holder: 'new holder', fence: BigInt(newToken) });
    expect(downstream.seen).toEqual([newToken, oldToken]);
    expect(await store.complete(takeover.claim, { status: 201, headers: {}, body: new Uint8Array() }, 60_000)).toBe(true);
    expect(await store.get('s', 'k')).toMatchObject({ state: 'completed', leaseToken: takeover.claim.leaseToken, response: { status: 201 } });
  } finally {
    child.kill('SIGKILL');
    accounts.close();
    await downstream.close();
  }
}

describe('a holder paused past its lease and resumed after a takeover', () => {
  it('has its fenced writes refused on the SQLite store', async () => {
    const path = join(dir, 'records.db');
    const stores: IdempotencyStore[] = [];
    try {
      await pausedHolderIsFenced({
        holderArgs: ['sqlite', path],
        takeoverStore: (clock) => {
          const store = createSqliteStore({ path, clock });
          stores.push(store);
          return store;
        },
      });
    } finally {
      for (const store of stores) await store.close?.();
    }
  });

  it.runIf(postgres)('has its fenced writes refused on the PostgreSQL store', async () => {
    const db = await createTestSchema('rs_sql_fence');
    try {
      await pausedHolderIsFenced({ holderArgs: ['postgres', POSTGRES_URL, db.schema], takeoverStore: (clock) => createPostgresStore({ pool: db.pool, schema: db.schema, clock }), db });
    } finally {
      await db.drop();
    }
  });
});
