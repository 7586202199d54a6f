/**
 * `Receiver.runBatch` on the SQLite store: the batch suite, transactional mode (each item's writes commit
 * with its completion, or all together with `atomic`), the batch claimed in one transaction, and a process
 * killed (SIGKILL) after half its batch committed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createReceiver } from '../../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';
import { batchItems, batchSuite, statusCounts } from '../../support/batch.js';
import { crashBatchChild } from '../../support/batch-crash.js';

const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

batchSuite('sqlite', () => {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createSqliteStore({ clock });
  return Promise.resolve({ store, clock, close: () => store.close() });
});

describe('runBatch on SQLite in transactional mode', () => {
  let dir: string;
  let store: SqliteStore;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-batch-'));
    store = createSqliteStore({ path: join(dir, 'records.db') });
    store.database.exec('CREATE TABLE effects (n INTEGER NOT NULL)');
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const effectCounts = (): Map<number, number> =>
    new Map((store.database.prepare('SELECT n, count(*) AS c FROM effects GROUP BY n').all() as { n: number; c: number }[]).map((row) => [row.n, row.c]));

  it('claims the batch in one transaction and commits each item with its own completion', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const claim = vi.spyOn(store, 'claim');
    const outcomes = await receiver.runBatch(batchItems(range(0, 10)), (n, { tx }) => {
      tx.prepare('INSERT INTO effects (n) VALUES (?)').run(n);
      if (n === 6) return Promise.reject(new Error('declined'));
      return Promise.resolve(n);
    });
    expect(claim).not.toHaveBeenCalled();
    expect(outcomes.map((o) => o.status)).toEqual(range(0, 10).map((n) => (n === 6 ? 'failed' : 'executed')));
    // The failed item's write rolled back with its transaction; the others committed.
    expect([...effectCounts().keys()].sort((a, b) => a - b)).toEqual(range(0, 10).filter((n) => n !== 6));
    expect(await store.get('batch', 'k6')).toBeUndefined();
  });

  it('atomic: one failing item rolls the whole batch back and releases every key', async () => {
    const receiver = createReceiver({ store, transactional: true });
    await receiver.runBatch(batchItems([0]), (n, { tx }) => Promise.resolve(tx.prepare('INSERT INTO effects (n) VALUES (?)').run(n).changes));
    const declined = new Error('declined');
    const outcomes = await receiver.runBatch(batchItems(range(0, 5)), (n, { tx }) => {
      tx.prepare('INSERT INTO effects (n) VALUES (?)').run(n);
      return n === 3 ? Promise.reject(declined) : Promise.resolve(n);
    }, { atomic: true });
    expect(outcomes.map((o) => o.status)).toEqual(['replayed', 'failed', 'failed', 'failed', 'failed']);
    expect(outcomes[3]?.status === 'failed' ? outcomes[3].error : undefined).toBe(declined);
    expect(outcomes[1]?.status === 'failed' ? (outcomes[1].error as Error).name : undefined).toBe('BatchRolledBackError');
    expect([...effectCounts().keys()]).toEqual([0]);
    const retry = await receiver.runBatch(batchItems(range(0, 5)), (n, { tx }) => {
      tx.prepare('INSERT INTO effects (n) VALUES (?)').run(n);
      return Promise.resolve(n);
    }, { atomic: true });
    expect(statusCounts(retry)).toEqual({ replayed: 1, executed: 4 });
    expect([...effectCounts().values()]).toEqual([1, 1, 1, 1, 1]);
  });

  it('a process killed after half its batch committed: the retry replays that half and runs the rest once', async () => {
    const path = join(dir, 'records.db');
    const ended = await crashBatchChild('sqlite', path, 200, 100);
    expect(ended.signal, ended.stderr).toBe('SIGKILL');
    expect(effectCounts().size).toBe(100);
    const receiver = createReceiver({ store, transactional: true });
    const outcomes = await receiver.runBatch(batchItems(range(0, 200)), (n, { tx }) => {
      tx.prepare('INSERT INTO effects (n) VALUES (?)').run(n);
      return Promise.resolve(n);
    }, { concurrency: 8 });
    expect(outcomes.map((o) => o.status)).toEqual(range(0, 200).map((n) => (n < 100 ? 'replayed' : 'executed')));
    const counts = effectCounts();
    expect(counts.size).toBe(200);
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
  }, 30_000);
});

