/**
 * Projections read through the inbox, on the real PostgreSQL server and on a SQLite file: every event
 * delivered twice, and concurrently, is applied once; a projection whose process dies before its COMMIT
 * leaves nothing, and the next delivery applies the event once. The projection adds each event's amount to
 * a row (not idempotent by itself), so a second application would show.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresEventStore,
  createSqliteEventStore,
  projectOnce,
  runProjection,
  type EventStore,
  type Projection,
  type RecordedEvent,
} from '../../src/events/index.js';
import { createInbox, createPostgresInboxStore, createSqliteInboxStore, type Inbox } from '../../src/messaging/inbox/index.js';
import { createTestSchema, postgresAvailable } from '../support/postgres-schema.js';
import { POSTGRES_URL } from '../support/services.js';

const CHILD = fileURLToPath(new URL('./fixtures/project-child.ts', import.meta.url));

/** Runs the child and SIGKILLs it once it reports `before-commit`; resolves after it died. */
function crashBeforeCommit(args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    let reached = false;
    child.stdout.on('data', (chunk: Buffer) => {
      if (!reached && chunk.toString().includes('before-commit')) {
        reached = true;
        child.kill('SIGKILL');
      }
    });
    child.once('exit', (_code, signal) => (reached && signal === 'SIGKILL' ? resolve() : reject(new Error(`the projection exited before its COMMIT: ${err}`))));
  });
}

/** One backend: its event store, an inbox on the same database, the projection of `totals`, and its rows. */
interface Backend<Tx> {
  readonly events: EventStore;
  readonly inbox: Inbox<Tx>;
  /** Adds the event's amount to its stream's row and sets the row's checkpoint, through the inbox's `tx`. */
  projection(name: string): Projection<Tx>;
  /** The `totals` row of `stream`: the sum applied, how many applications, the checkpoint. */
  row(stream: string): Promise<{ total: number; applied: number; checkpoint: number }>;
  /** Creates the stream's row at zero. */
  start(stream: string): Promise<void>;
  /** The arguments of the crashing child. */
  readonly child: readonly string[];
}

const amount = (event: RecordedEvent): number => (event.data as { amount: number }).amount;

function projectionBehaviour<Tx>(name: string, open: () => Promise<Backend<Tx>>): void {
  describe(`projections through the inbox on ${name}`, () => {
    it('applies each event once when the stream is projected twice, and resumes from nextVersion', async () => {
      const backend = await open();
      await backend.start('order-1');
      await backend.events.appendOnce('order-1', [1, 10, 100].map((n) => ({ type: 'Paid', data: { amount: n } })), { expectedVersion: 'no_stream', idempotencyKey: 'pay' });
      const projection = backend.projection('totals');
      expect(await runProjection(backend.inbox, backend.events, projection, { stream: 'order-1' })).toEqual({ applied: 3, duplicates: 0, nextVersion: 3 });
      expect(await runProjection(backend.inbox, backend.events, projection, { stream: 'order-1' })).toEqual({ applied: 0, duplicates: 3, nextVersion: 3 });
      expect(await backend.row('order-1')).toEqual({ total: 111, applied: 3, checkpoint: 2 });
      await backend.events.appendOnce('order-1', [{ type: 'Paid', data: { amount: 1000 } }], { expectedVersion: 2, idempotencyKey: 'pay-more' });
      expect(await runProjection(backend.inbox, backend.events, projection, { stream: 'order-1', fromVersion: 3 })).toEqual({ applied: 1, duplicates: 0, nextVersion: 4 });
      expect(await backend.row('order-1')).toEqual({ total: 1111, applied: 4, checkpoint: 3 });
      // Another projection of the same events keeps marks of its own and applies each once too.
      await backend.start('order-1-copy');
      const copy: Projection<Tx> = { name: 'totals-copy', apply: (tx, event, context) => backend.projection('totals-copy').apply(tx, { ...event, stream: 'order-1-copy' }, context) };
      expect(await runProjection(backend.inbox, backend.events, copy, { stream: 'order-1' })).toMatchObject({ applied: 4, duplicates: 0 });
      expect(await backend.row('order-1-copy')).toEqual({ total: 1111, applied: 4, checkpoint: 3 });
    });

    it('applies an event delivered eight times at once exactly once', async () => {
      const backend = await open();
      await backend.start('order-2');
      const appended = await backend.events.appendOnce('order-2', [{ type: 'Paid', data: { amount: 7 } }], { expectedVersion: 'any', idempotencyKey: 'pay' });
      const [event] = await backend.events.read('order-2');
      expect(event?.eventId).toBe(appended.events[0]?.eventId);
      const outcomes = await Promise.all(Array.from({ length: 8 }, () => projectOnce(backend.inbox, backend.projection('concurrent'), event as RecordedEvent)));
      expect(outcomes.filter((o) => o.status === 'processed')).toHaveLength(1);
      expect(outcomes.filter((o) => o.status === 'duplicate')).toHaveLength(7);
      expect(await backend.row('order-2')).toEqual({ total: 7, applied: 1, checkpoint: 0 });
    });

    it('rolls back an apply that throws with its mark, and applies the event once on the next delivery', async () => {
      const backend = await open();
      await backend.start('order-3');
      await backend.events.appendOnce('order-3', [{ type: 'Paid', data: { amount: 5 } }, { type: 'Paid', data: { amount: 6 } }], { expectedVersion: 'any', idempotencyKey: 'pay' });
      const real = backend.projection('flaky');
      let fail = true;
      const flaky: Projection<Tx> = {
        name: 'flaky',
        apply: async (tx, event, context) => {
          await real.apply(tx, event, context);
          if (fail && event.version === 1) throw new Error('injected after the write');
        },
      };
      const first = await runProjection(backend.inbox, backend.events, flaky, { stream: 'order-3' });
      expect(first).toMatchObject({ applied: 1, duplicates: 0, nextVersion: 1, stoppedAt: { event: { version: 1 }, outcome: { status: 'retry', attempts: 1 } } });
      expect(await backend.row('order-3')).toEqual({ total: 5, applied: 1, checkpoint: 0 });
      fail = false;
      expect(await runProjection(backend.inbox, backend.events, flaky, { stream: 'order-3', fromVersion: first.nextVersion })).toEqual({ applied: 1, duplicates: 0, nextVersion: 2 });
      expect(await backend.row('order-3')).toEqual({ total: 11, applied: 2, checkpoint: 1 });
    });

    it('leaves nothing of a projection whose process died before COMMIT; the next delivery applies the event once', async () => {
      const backend = await open();
      await backend.start('order-1');
      await backend.events.appendOnce('order-1', [{ type: 'Paid', data: { amount: 42 } }], { expectedVersion: 'no_stream', idempotencyKey: 'pay' });
      await crashBeforeCommit(backend.child);
      expect(await backend.row('order-1')).toEqual({ total: 0, applied: 0, checkpoint: -1 });
      const again = await runProjection(backend.inbox, backend.events, backend.projection('totals'), { stream: 'order-1' });
      expect(again).toEqual({ applied: 1, duplicates: 0, nextVersion: 1 });
      expect(await runProjection(backend.inbox, backend.events, backend.projection('totals'), { stream: 'order-1' })).toMatchObject({ applied: 0, duplicates: 1 });
      expect(await backend.row('order-1')).toEqual({ total: 42, applied: 1, checkpoint: 0 });
    });

    it('refuses a projection without a name or an apply', async () => {
      const backend = await open();
      const event = { stream: 's', eventId: 'e', version: 0, position: 1, type: 't', data: null, metadata: null, appendedAt: 0 };
      expect(() => projectOnce(backend.inbox, { name: '', apply: () => Promise.resolve() }, event)).toThrow(/"name"/);
      expect(() => projectOnce(backend.inbox, { name: 'p' } as Projection<Tx>, event)).toThrow(/"apply"/);
    });
  });
}

if (await postgresAvailable()) {
  const schemas: { drop(): Promise<void> }[] = [];
  afterAll(async () => {
    for (const schema of schemas) await schema.drop();
  });
  projectionBehaviour<pg.PoolClient>('postgres', async () => {
    const db = await createTestSchema('rs_projection');
    schemas.push(db);
    const { pool, schema } = db;
    await pool.query(`CREATE TABLE "${schema}".totals (stream text PRIMARY KEY, total bigint NOT NULL DEFAULT 0, applied int NOT NULL DEFAULT 0, checkpoint int NOT NULL DEFAULT -1)`);
    return {
      events: createPostgresEventStore({ pool, schema }),
      inbox: createInbox({ store: createPostgresInboxStore({ pool, schema }) }),
      projection: (name) => ({
        name,
        apply: async (tx, event) => {
          await tx.query(`UPDATE "${schema}".totals SET total = total + $1, applied = applied + 1, checkpoint = $2 WHERE stream = $3`, [amount(event), event.version, event.stream]);
        },
      }),
      row: async (stream) => {
        const { rows } = await pool.query<{ total: string; applied: number; checkpoint: number }>(`SELECT total, applied, checkpoint FROM "${schema}".totals WHERE stream = $1`, [stream]);
        const row = rows[0];
        return { total: Number(row?.total), applied: row?.applied ?? NaN, checkpoint: row?.checkpoint ?? NaN };
      },
      start: async (stream) => void (await pool.query(`INSERT INTO "${schema}".totals (stream) VALUES ($1)`, [stream])),
      child: ['postgres', POSTGRES_URL, schema],
    };
  });
}

const dir = mkdtempSync(join(tmpdir(), 'retrysafe-projection-'));
const databases: BetterSqlite3.Database[] = [];
afterAll(() => {
  for (const database of databases) database.close();
  rmSync(dir, { recursive: true, force: true });
});
let files = 0;
projectionBehaviour<BetterSqlite3.Database>('sqlite', () => {
  const path = join(dir, `projection-${++files}.db`);
  const database = new BetterSqlite3(path);
  databases.push(database);
  database.pragma('journal_mode = WAL');
  database.exec('CREATE TABLE totals (stream TEXT PRIMARY KEY, total INTEGER NOT NULL DEFAULT 0, applied INTEGER NOT NULL DEFAULT 0, checkpoint INTEGER NOT NULL DEFAULT -1)');
  return Promise.resolve({
    events: createSqliteEventStore({ database }),
    inbox: createInbox({ store: createSqliteInboxStore({ database }) }),
    projection: (name: string): Projection<BetterSqlite3.Database> => ({
      name,
      apply: (tx, event) => {
        tx.prepare('UPDATE totals SET total = total + ?, applied = applied + 1, checkpoint = ? WHERE stream = ?').run(amount(event), event.version, event.stream);
        return Promise.resolve();
      },
    }),
    row: (stream: string) => Promise.resolve(database.prepare('SELECT total, applied, checkpoint FROM totals WHERE stream = ?').get(stream) as { total: number; applied: number; checkpoint: number }),
    start: (stream: string) => Promise.resolve(void database.prepare('INSERT INTO totals (stream) VALUES (?)').run(stream)),
    child: ['sqlite', path, ''],
  });
});
