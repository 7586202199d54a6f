/**
 * Atomic phases on the PostgreSQL store: the phases contract in transactional mode (each phase's writes
 * and its recovery point commit in one transaction) and in plain mode, the plan being the three-phase
 * ride of `fixtures/ride-plan.ts` written against a `pg` client.
 */
import type pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { phasesContract, type PhaseSubject, type RideRow } from './contract.js';
import { sagaContract, type SagaSubject } from './saga-contract.js';
import { LEASE_MS } from './fixtures/ride-fakes.js';
import { postgresRidePlan } from './fixtures/ride-plan.js';

const available = await postgresAvailable();

if (available) {
  let db: TestSchema;
  let rides: string;

  beforeAll(async () => {
    db = await createTestSchema('rs_phases');
    rides = `"${db.schema}".rides`;
    await db.pool.query(`CREATE TABLE ${rides} (
      id              serial PRIMARY KEY,
      idempotency_key text NOT NULL,
      rider           text NOT NULL,
      cents           integer NOT NULL,
      charge_id       text,
      receipts        integer NOT NULL DEFAULT 0)`);
  });
  afterAll(async () => {
    await db.drop();
  });

  async function open(transactional: boolean): Promise<PhaseSubject<pg.PoolClient | undefined>> {
    await db.pool.query(`TRUNCATE ${rides}, "${db.schema}".records RESTART IDENTITY`);
    const clock = new ManualClock(1_700_000_000_000);
    const store = createPostgresStore({ pool: db.pool, schema: db.schema, clock });
    const runner: PhaseRunner<pg.PoolClient | undefined> = transactional
      ? createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS })
      : createPhaseRunner({ store, leaseMs: LEASE_MS });
    return {
      store,
      runner,
      clock,
      // In plain mode each phase writes on the pool (autocommit), as a plain store's caller would.
      plan: (cards, hooks) => postgresRidePlan(rides, cards, hooks, transactional ? undefined : db.pool),
      rides: async () => (await db.pool.query<RideRow>(`SELECT charge_id, receipts FROM ${rides} ORDER BY id`)).rows,
      close: () => store.close(),
    };
  }

  phasesContract('PostgreSQL', { transactional: true, concurrentTransactions: true }, () => open(true));
  phasesContract('PostgreSQL', { transactional: false }, () => open(false));

  async function openSaga(transactional: boolean): Promise<SagaSubject<pg.PoolClient | undefined>> {
    await db.pool.query(`TRUNCATE "${db.schema}".records`);
    const clock = new ManualClock(1_700_000_000_000);
    const store = createPostgresStore({ pool: db.pool, schema: db.schema, clock });
    return {
      store,
      clock,
      runner: (maxCompensationAttempts) =>
        transactional
          ? createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS, maxCompensationAttempts })
          : createPhaseRunner({ store, leaseMs: LEASE_MS, maxCompensationAttempts }),
      close: () => store.close(),
    };
  }

  sagaContract('PostgreSQL', { transactional: true }, () => openSaga(true));
  sagaContract('PostgreSQL', { transactional: false }, () => openSaga(false));
}
