/**
 * The SQLite event store: the shared behaviour on a file per test, appenders in four processes on one
 * file, and a child process killed between the append's statements and its COMMIT.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqliteEventStore, type AppendedEvent } from '../../src/events/index.js';
import { eventStoreBehaviour } from './behaviour.js';
import { crashBeforeCommit, runChild } from './crash.js';

const dir = mkdtempSync(join(tmpdir(), 'retrysafe-events-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

// better-sqlite3 runs each append to its end before the next starts, so in-process "concurrency" would
// prove nothing; the process test below runs appenders at once.
eventStoreBehaviour(
  'sqlite',
  () => {
    const store = createSqliteEventStore({ path: join(dir, `behaviour-${++files}.db`) });
    return Promise.resolve({ store, close: () => store.close() });
  },
  false,
);

describe('sqlite event store across processes', () => {
  it('writes each key once when four processes append the same keys to one file at once', async () => {
    const path = join(dir, 'shared.db');
    await createSqliteEventStore({ path, prefix: 'ev' }).close();
    const keys = Array.from({ length: 15 }, (_, i) => `key-${i}`);
    // Each process appends every key, in its own order, so the same append meets itself in other processes.
    const orders = [keys, [...keys].reverse(), [...keys.slice(7), ...keys.slice(0, 7)], [...keys.slice(3), ...keys.slice(0, 3)]];
    const outputs = await Promise.all(orders.map((order) => runChild(['append', 'sqlite', path, 'ev', ...order])));
    const answers = outputs.flat().map((line) => JSON.parse(line) as AppendedEvent[]);
    expect(answers).toHaveLength(60);
    expect(answers.filter((events) => events[0]?.status === 'appended')).toHaveLength(15);
    const store = createSqliteEventStore({ path, prefix: 'ev' });
    const read = await store.read('shared');
    expect(read.map((e) => e.version)).toEqual(Array.from({ length: 30 }, (_, i) => i));
    expect(new Set(read.map((e) => (e.data as { key: string }).key)).size).toBe(15);
    // Every answer for a key names the same positions, whichever process wrote it.
    const byId = new Map(read.map((e) => [e.eventId, e.position]));
    for (const events of answers) for (const e of events) expect(byId.get(e.eventId)).toBe(e.position);
    await store.close();
  });

  it('leaves nothing of an append whose process died before COMMIT; the retry appends it once', async () => {
    const path = join(dir, 'crash.db');
    await crashBeforeCommit('sqlite', path, 'ev');
    const store = createSqliteEventStore({ path, prefix: 'ev' });
    expect(await store.read('crash')).toEqual([]);
    const retry = await store.appendOnce('crash', [{ type: 'Crashed', data: { n: 1 } }], { expectedVersion: 'no_stream', idempotencyKey: 'crash-key' });
    expect(retry.events.map((e) => [e.version, e.status])).toEqual([[0, 'appended']]);
    await store.close();
  });
});
