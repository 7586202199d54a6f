/**
 * Atomic phases on the DynamoDB store (DynamoDB Local): the phases contract and the saga contract in plain
 * mode (each phase alone, then a fenced checkpoint write), and a race across two clients. The plan is the three-phase ride of
 * `fixtures/ride-plan.ts`, its rows in an in-memory SQLite database.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { RequestInProgressError } from '../../src/core/errors.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { createDynamodbStore } from '../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile, storeOnTableWithoutTtl } from '../support/dynamodb.js';
import { uniqueName } from '../support/services.js';
import { phasesContract, type PhaseSubject, type RideRow } from './contract.js';
import { sagaContract } from './saga-contract.js';
import { FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan } from './fixtures/ride-plan.js';

function rows(database: Database): RideRow[] {
  return database.prepare('SELECT charge_id, receipts FROM rides ORDER BY rowid').all() as RideRow[];
}

const PREFIX = uniqueName('rs_ddb_phases');
const local = await dynamodbLocalForFile();

if (local !== undefined) {
  afterAll(() => local.stop());
  let tests = 0;

  async function open(): Promise<PhaseSubject<undefined> & { readonly table: string }> {
    const table = `${PREFIX}_${++tests}`;
    const clock = new ManualClock(1_700_000_000_000);
    const store = await storeOnTableWithoutTtl(local as NonNullable<typeof local>, table, clock);
    const database = new BetterSqlite3(':memory:');
    database.exec(RIDES_SQL);
    return {
      table,
      store,
      runner: createPhaseRunner({ store, leaseMs: LEASE_MS }),
      clock,
      plan: (cards, hooks) => ridePlan(cards, hooks, database),
      rides: () => Promise.resolve(rows(database)),
      close: async () => {
        await store.close();
        database.close();
      },
    };
  }

  phasesContract('DynamoDB', { transactional: false }, open);
  sagaContract('DynamoDB', { transactional: false }, async () => {
    const subject = await open();
    return {
      store: subject.store,
      clock: subject.clock,
      runner: (maxCompensationAttempts) => createPhaseRunner({ store: subject.store, leaseMs: LEASE_MS, maxCompensationAttempts }),
      close: () => subject.close(),
    };
  });

  describe('atomic phases on DynamoDB across clients', () => {
    let subject: PhaseSubject<undefined> & { readonly table: string };
    let cards: FakeCards;
    const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };
    beforeEach(async () => {
      subject = await open();
      cards = new FakeCards();
    });
    afterEach(async () => {
      await subject.close();
    });

    it('runs a key once when 10 executions race on two clients', async () => {
      const otherRunner = createPhaseRunner({
        store: createDynamodbStore({ client: local.newClient(), table: subject.table, clock: subject.clock }),
        leaseMs: LEASE_MS,
      });
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
    });
  });
}
