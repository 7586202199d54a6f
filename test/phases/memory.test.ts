/**
 * Atomic phases on the memory store (plain mode): the phases contract, its rides in an in-memory SQLite
 * database, and a two-phase plan of its own.
 */
import BetterSqlite3 from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { RequestInProgressError } from '../../src/core/errors.js';
import { definePhases } from '../../src/phases/plan.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { phasesContract, type RideRow } from './contract.js';
import { sagaContract } from './saga-contract.js';
import { FP, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan } from './fixtures/ride-plan.js';

phasesContract('the memory store', { transactional: false }, () => {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createMemoryStore({ clock });
  const database = new BetterSqlite3(':memory:');
  database.exec(RIDES_SQL);
  return Promise.resolve({
    store,
    runner: createPhaseRunner({ store, leaseMs: LEASE_MS }),
    clock,
    plan: (cards, hooks) => ridePlan(cards, hooks, database),
    rides: () => Promise.resolve(database.prepare('SELECT charge_id, receipts FROM rides ORDER BY rowid').all() as RideRow[]),
    close: async () => {
      await store.close();
      database.close();
    },
  });
});

sagaContract('the memory store', { transactional: false }, () => {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createMemoryStore({ clock });
  return Promise.resolve({
    store,
    clock,
    runner: (maxCompensationAttempts) => createPhaseRunner({ store, leaseMs: LEASE_MS, maxCompensationAttempts }),
    close: () => store.close(),
  });
});

describe('atomic phases on the memory store', () => {
  it('runs on the memory store with fenced checkpoints and answers a live duplicate with 409', async () => {
    const clock = new ManualClock(0);
    const store = createMemoryStore({ clock });
    const runner = createPhaseRunner({ store, leaseMs: LEASE_MS });
    const seen: unknown[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const plan = definePhases<undefined, { n: number }>({
      id: 'counter',
      phases: [
        { name: 'one', run: ({ input }) => Promise.resolve({ sum: input.n + 1 }) },
        {
          name: 'two',
          run: async ({ state, resumed }) => {
            seen.push(state, resumed);
            await gate;
            return (state as { sum: number }).sum * 10;
          },
        },
      ],
    });
    const id = { scope: 's', key: 'k', fingerprint: FP };
    const running = runner.execute(plan, id, { n: 1 });
    await new Promise((resolve) => setImmediate(resolve));
    await expect(runner.execute(plan, id, { n: 1 })).rejects.toBeInstanceOf(RequestInProgressError);
    release();
    const execution = await running;
    expect(seen).toEqual([{ sum: 2 }, false]);
    expect(execution.response).toMatchObject({ status: 200, headers: { 'content-type': 'application/json' } });
    expect(new TextDecoder().decode(execution.response.body)).toBe('20');
  });
});
