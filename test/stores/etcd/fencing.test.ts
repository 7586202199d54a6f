/**
 * Fencing carried into the business write: a holder (a child process) claims a key on etcd, is SIGSTOPped
 * past its lease, the key is taken over and the new holder writes; resumed, the old holder's writes —
 * a fenced update in PostgreSQL and in SQLite, an HTTP call with the Fencing-Token header — are refused,
 * and so is its completion.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { fencingHeaders } from '../../../src/core/record.js';
import { createEtcdStore } from '../../../src/stores/etcd/index.js';
import { fencedUpdate as pgFencedUpdate } from '../../../src/stores/postgres/index.js';
import { fencedUpdate as sqliteFencedUpdate } from '../../../src/stores/sqlite/index.js';
import { etcdAvailable, startEtcd } from '../../support/etcd.js';
import { createTestSchema, postgresAvailable } from '../../support/postgres-schema.js';
import { POSTGRES_URL } from '../../support/services.js';
import { fencedDownstream } from '../../support/fenced-downstream.js';

const HOLDER = fileURLToPath(new URL('./fixtures/holder.ts', import.meta.url));

if ((await etcdAvailable()) && (await postgresAvailable())) {
  const cluster = await startEtcd(1);
  const client = cluster.client();
  const db = await createTestSchema('rs_etcd_fence');
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-fence-'));
  afterAll(async () => {
    client.close();
    await cluster.stop();
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses the writes of a holder paused past its lease once the key was taken over', async () => {
    await db.pool.query(`CREATE TABLE "${db.schema}".accounts (id int PRIMARY KEY, holder text NOT NULL, fence bigint NOT NULL DEFAULT 0)`);
    await db.pool.query(`INSERT INTO "${db.schema}".accounts (id, holder) VALUES (1, 'nobody')`);
    const sqlitePath = join(dir, 'accounts.db');
    const sqlite = new BetterSqlite3(sqlitePath);
    sqlite.exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, holder TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0); INSERT INTO accounts (id, holder) VALUES (1, 'nobody')`);
    const fenced = await fencedDownstream();
    const { url: downstream, seen } = fenced;

    const child = spawn(process.execPath, ['--import', 'tsx', HOLDER, cluster.hosts[0] ?? '', POSTGRES_URL, db.schema, sqlitePath, downstream], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    const line = (n: number): Promise<string> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (lines.length > n) resolve(lines[n] as string);
        };
        child.stdout.on('data', (chunk: Buffer) => {
          lines.push(...chunk.toString().split('\n').filter(Boolean));
          check();
        });
        child.once('exit', (code) => (lines.length > n ? undefined : reject(new Error(`the holder exited (${String(code)})`))));
        check();
      });
    const claimed = await line(0);
    // Paused mid-work, as a GC pause or a stalled VM would: it holds a claim it no longer owns once the lease ends.
    expect(child.kill('SIGSTOP')).toBe(true);
    const oldToken = claimed.replace('claimed ', '');

    // Another node, its clock past the holder's lease, takes the key over and writes with its larger token.
    const store = createEtcdStore({ client, prefix: 'fenced', clock: new ManualClock(Date.now() + 10_000) });
    const takeover = await store.claim({ scope: 's', key: 'k', fingerprint: 'f', leaseMs: 60_000, retentionMs: 60_000 });
    if (!takeover.acquired) throw new Error('expected the takeover to win');
    const newToken = takeover.claim.fencingToken ?? '';
    expect(takeover.claim.takeover).toBe(true);
    expect(BigInt(newToken)).toBeGreaterThan(BigInt(oldToken));
    const update = { table: `${db.schema}.accounts`, id: 1, set: { holder: 'new holder' }, fencingToken: newToken };
    expect(await pgFencedUpdate(db.pool, update)).toBe(true);
    expect(sqliteFencedUpdate(sqlite, { ...update, table: 'accounts' })).toBe(true);
    expect((await fetch(downstream, { method: 'POST', headers: fencingHeaders(takeover.claim), body: 'new holder' })).status).toBe(204);

    expect(child.kill('SIGCONT')).toBe(true);
    const outcome = JSON.parse(await line(1)) as Record<string, unknown>;
    expect(outcome).toEqual({ postgres: false, sqlite: false, http: 409, completed: false });
    expect((await db.pool.query(`SELECT holder, fence::text FROM "${db.schema}".accounts`)).rows).toEqual([{ holder: 'new holder', fence: newToken }]);
    expect(sqlite.prepare('SELECT holder, fence FROM accounts').safeIntegers(true).get()).toEqual({ holder: 'new holder', fence: BigInt(newToken) });
    expect(seen).toEqual([newToken, oldToken]);
    expect(await store.complete(takeover.claim, { status: 201, headers: {}, body: new Uint8Array() }, 60_000)).toBe(true);
    sqlite.close();
    await fenced.close();
  });
}
