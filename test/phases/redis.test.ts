/**
 * Atomic phases on the Redis store: the phases contract in plain mode (Redis cannot commit with the
 * business database, so each phase runs alone and a fenced checkpoint script records it), and a race
 * across two connections. The plan is the three-phase ride of
 * `fixtures/ride-plan.ts`, its rows in an in-memory SQLite database.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { RequestInProgressError } from '../../src/core/errors.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { deleteUnder } from '../support/redis.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../support/services.js';
import { phasesContract, type PhaseSubject, type RideRow } from './contract.js';
import { sagaContract } from './saga-contract.js';
import { FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan } from './fixtures/ride-plan.js';

function rows(database: Database): RideRow[] {
  return database.prepare('SELECT charge_id, receipts FROM rides ORDER BY rowid').all() as RideRow[];
}

const FILE_PREFIX = uniqueName('rs_phases');

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
  });

  let tests = 0;

  async function open(): Promise<PhaseSubject<undefined> & { readonly prefix: string }> {
    const prefix = `${FILE_PREFIX}:t${++tests}`;
    const clock = new ManualClock(1_700_000_000_000);
    const store = createRedisStore({ client, prefix, clock });
    const database = new BetterSqlite3(':memory:');
    database.exec(RIDES_SQL);
    return Promise.resolve({
      prefix,
      store,
      runner: createPhaseRunner({ store, leaseMs: LEASE_MS }),
      clock,
      plan: (cards, hooks) => ridePlan(cards, hooks, database),
      rides: () => Promise.resolve(rows(database)),
      close: async () => {
        await store.close();
        database.close();
        await deleteUnder(client, prefix);
      },
    });
  }

  phasesContract('Redis', { transactional: false }, open);
  sagaContract('Redis', { transactional: false }, async () => {
    const subject = await open();
    return {
      store: subject.store,
      clock: subject.clock,
      runner: (maxCompensationAttempts) => createPhaseRunner({ store: subject.store, leaseMs: LEASE_MS, maxCompensationAttempts }),
      close: () => subject.close(),
    };
  });

  describe('atomic phases on Redis across connections', () => {
    let subject: PhaseSubject<undefined> & { readonly prefix: string };
    let cards: FakeCards;
    const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };
    beforeEach(async () => {
      subject = await open();
      cards = new FakeCards();
    });
    afterEach(async () => {
      await subject.close();
    });

    it('runs a key once when 10 executions race on two connections', async () => {
      const other = client.duplicate();
      await other.connect();
      try {
        const otherRunner = createPhaseRunner({ store: createRedisStore({ client: other, prefix: subject.prefix, clock: subject.clock }), leaseMs: LEASE_MS });
        const hooks = faults();
        const plan = subject.plan(cards, hooks);
        const outcomes = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? subject.runner : otherRunner).execute(plan, id, INPUT)),
        );
        const fresh = outcomes.filter((o) => o.status === 'fulfilled' && !o.value.replayed);
        expect(fresh).toHaveLength(1);
        for (const outcome of outcomes) {
          if (outcome.status === 'rejected') expect(outcome.reason).toBeInstanceOf(RequestInProgressError);
        }
        expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
        expect(cards.calls).toBe(1);
        expect(await subject.rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      } finally {
        await other.quit();
      }
    });
  });
}
