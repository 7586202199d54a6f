/**
 * `Receiver.runBatch` on the PostgreSQL store: the batch suite, the batch claimed in one statement over
 * arrays, transactional mode with `atomic`, and a process killed (SIGKILL) after half its batch committed.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createPostgresStore, type PostgresStore } from '../../../src/postgres.js';
import { createReceiver } from '../../../src/receiver.js';
import { batchItems, batchSuite, statusCounts } from '../../support/batch.js';
import { crashBatchChild } from '../../support/batch-crash.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();
const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

describe.runIf(available)('runBatch on PostgreSQL', () => {
  let db: TestSchema;
  let store: PostgresStore;

  beforeAll(async () => {
    db = await createTestSchema('rs_batch');
    await db.pool.query(`CREATE TABLE "${db.schema}".effects (n integer NOT NULL)`);
    store = createPostgresStore({ pool: db.pool, schema: db.schema, listen: false });
  });
  afterAll(async () => {
    await store.close();
    await db.drop();
  });

  batchSuite('postgres', async () => {
    await db.truncate();
    const clock = new ManualClock(1_700_000_000_000);
    return { store: createPostgresStore({ pool: db.pool, schema: db.schema, clock, listen: false }), clock, close: () => Promise.resolve() };
  });

  const effectCounts = async (): Promise<Map<number, number>> => {
    const { rows } = await db.pool.query<{ n: number; c: string }>(`SELECT n, count(*) AS c FROM "${db.schema}".effects GROUP BY n`);
    return new Map(rows.map((row) => [row.n, Number(row.c)]));
  };

  it('claims the whole batch in one query', async () => {
    await db.truncate();
    const query = vi.spyOn(db.pool, 'query');
    const outcomes = await createReceiver({ store }).runBatch(batchItems(range(0, 50), 'one-query'), (n) => Promise.resolve(n));
    expect(statusCounts(outcomes)).toEqual({ executed: 50 });
    // One claim statement, then one completion per item.
    expect(query).toHaveBeenCalledTimes(51);
    query.mockRestore();
  });

  it('atomic: one failing item rolls the whole batch back', async () => {
    await db.truncate();
    await db.pool.query(`TRUNCATE "${db.schema}".effects`);
    const receiver = createReceiver({ store, transactional: true });
    const write = async (n: number, tx: { query(text: string, values: unknown[]): Promise<unknown> }): Promise<number> => {
      await tx.query(`INSERT INTO "${db.schema}".effects (n) VALUES ($1)`, [n]);
      if (n === 2) throw new Error('declined');
      return n;
    };
    const outcomes = await receiver.runBatch(batchItems(range(0, 4), 'atomic'), (n, { tx }) => write(n, tx), { atomic: true });
    expect(statusCounts(outcomes)).toEqual({ failed: 4 });
    expect((await effectCounts()).size).toBe(0);
    const retry = await receiver.runBatch(batchItems(range(0, 4), 'atomic'), (n, { tx }) => write(n === 2 ? 20 : n, tx), { atomic: true });
    expect(statusCounts(retry)).toEqual({ executed: 4 });
    expect([...(await effectCounts()).values()]).toEqual([1, 1, 1, 1]);
  });

  it('a process killed after half its batch committed: the retry replays that half and runs the rest once', async () => {
    await db.truncate();
    await db.pool.query(`TRUNCATE "${db.schema}".effects`);
    const ended = await crashBatchChild('postgres', db.schema, 200, 100);
    expect(ended.signal, ended.stderr).toBe('SIGKILL');
    expect((await effectCounts()).size).toBe(100);
    const receiver = createReceiver({ store, transactional: true });
    const outcomes = await receiver.runBatch(batchItems(range(0, 200)), async (n, { tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".effects (n) VALUES ($1)`, [n]);
      return n;
    }, { concurrency: 8 });
    expect(outcomes.map((o) => o.status)).toEqual(range(0, 200).map((n) => (n < 100 ? 'replayed' : 'executed')));
    const counts = await effectCounts();
    expect(counts.size).toBe(200);
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
  }, 30_000);
});
