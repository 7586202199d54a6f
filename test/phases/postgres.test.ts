/**
 * Atomic phases on the PostgreSQL store in transactional mode: each phase's writes and its recovery point
 * commit in one transaction, a retry or the completer resumes after the last committed phase, and a
 * foreign charge under a derived key lands once. The plan is the three-phase ride of
 * `fixtures/ride-plan.ts`, written against a `pg` client instead of SQLite.
 */
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import { definePhases, type PhasePlan } from '../../src/phases/plan.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import { createPostgresStore, type PostgresStore } from '../../src/stores/postgres/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { body, FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import type { CardNetwork, RideHooks, RideInput, RideState } from './fixtures/ride-plan.js';

/** The ride plan of `fixtures/ride-plan.ts` on PostgreSQL: every phase writes through the transaction it is handed. */
function ridePlan(rides: string, cards: CardNetwork, hooks: RideHooks = {}): PhasePlan<pg.PoolClient, RideInput> {
  return definePhases<pg.PoolClient, RideInput>({
    id: 'ride.create',
    phases: [
      {
        name: 'ride-created',
        run: async ({ tx, input, claim }) => {
          await hooks.started?.('ride-created');
          const { rows } = await tx.query<{ id: number }>(
            `INSERT INTO ${rides} (idempotency_key, rider, cents) VALUES ($1, $2, $3) RETURNING id`,
            [claim.key, input.rider, input.cents],
          );
          await hooks.finished?.('ride-created');
          return { rowid: rows[0]?.id ?? 0 } satisfies RideState;
        },
      },
      {
        name: 'charged',
        run: async ({ tx, input, state, derivedKey: keyFor }) => {
          await hooks.started?.('charged');
          const { rowid } = state as RideState;
          const chargeId = await cards.charge(keyFor('charge'), input.cents);
          await tx.query(`UPDATE ${rides} SET charge_id = $1 WHERE id = $2`, [chargeId, rowid]);
          await hooks.finished?.('charged');
          return { rowid, chargeId } satisfies RideState;
        },
      },
      {
        name: 'receipt-sent',
        run: async ({ tx, state }) => {
          await hooks.started?.('receipt-sent');
          const { rowid, chargeId } = state as RideState;
          await tx.query(`UPDATE ${rides} SET receipts = receipts + 1 WHERE id = $1`, [rowid]);
          await hooks.finished?.('receipt-sent');
          return { rowid, chargeId };
        },
      },
    ],
    respond: (value) => ({
      status: 201,
      headers: { 'content-type': 'application/json' },
      body: new TextEncoder().encode(JSON.stringify(value)),
    }),
  });
}

const available = await postgresAvailable();

describe.runIf(available)('atomic phases on PostgreSQL, transactional mode', () => {
  let db: TestSchema;
  let rides: string;
  let clock: ManualClock;
  let store: PostgresStore;
  let runner: PhaseRunner<pg.PoolClient>;
  let cards: FakeCards;
  const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };

  async function rows(): Promise<{ charge_id: string | null; receipts: number }[]> {
    const result = await db.pool.query<{ charge_id: string | null; receipts: number }>(`SELECT charge_id, receipts FROM ${rides} ORDER BY id`);
    return result.rows;
  }

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
  beforeEach(async () => {
    await db.pool.query(`TRUNCATE ${rides}, "${db.schema}".records RESTART IDENTITY`);
    clock = new ManualClock(1_700_000_000_000);
    store = createPostgresStore({ pool: db.pool, schema: db.schema, clock });
    runner = createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS });
    cards = new FakeCards();
    return () => store.close();
  });

  it('runs the three phases once, charges once and replays the saved response', async () => {
    const hooks = faults();
    const plan = ridePlan(rides, cards, hooks);
    const first = await runner.execute(plan, id, INPUT);
    expect(first).toMatchObject({ replayed: false });
    expect(first.resumedFrom).toBeUndefined();
    expect(body(first.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    const replay = await runner.execute(plan, id, INPUT);
    expect(replay.replayed).toBe(true);
    expect(body(replay.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
    expect([...cards.charges.keys()]).toEqual([derivedKey(id, 'charge')]);
    expect(cards.calls).toBe(1);
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    const record = await store.get('riders', 'ride-1');
    expect(record?.state).toBe('completed');
    expect(decodeRecoveryPoint(record?.recoveryPoint ?? '')).toMatchObject({ plan: 'ride.create', phase: 'charged' });
  });

  it('resumes at phase 3 after a crash that followed phase 2’s checkpoint, charging exactly once', async () => {
    const hooks = faults({ at: 'started', phase: 'receipt-sent' });
    const plan = ridePlan(rides, cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash started receipt-sent');

    // Phases 1 and 2 committed with their recovery point; the failed run handed its lease back.
    const stranded = await store.get('riders', 'ride-1');
    expect(stranded).toMatchObject({ state: 'in_progress', leaseExpiresAt: clock.now() });
    expect(decodeRecoveryPoint(stranded?.recoveryPoint ?? '')).toEqual({
      plan: 'ride.create',
      phase: 'charged',
      input: INPUT,
      state: { rowid: 1, chargeId: 'ch_1' },
    });
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 0 }]);

    const retry = await runner.execute(plan, id, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
    expect(body(retry.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 2 });
    expect((await runner.execute(plan, id, INPUT)).replayed).toBe(true);
    expect(cards.calls).toBe(1);
    expect(cards.charges.size).toBe(1);
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('rolls back a phase that failed before its checkpoint; the retry re-runs it and the derived key dedups the charge', async () => {
    const hooks = faults({ at: 'finished', phase: 'charged' });
    const plan = ridePlan(rides, cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash finished charged');
    // The card was charged, but phase 2's UPDATE rolled back with its transaction (and its checkpoint).
    expect(cards.charges.size).toBe(1);
    expect(await rows()).toEqual([{ charge_id: null, receipts: 0 }]);
    expect(decodeRecoveryPoint((await store.get('riders', 'ride-1'))?.recoveryPoint ?? '')?.phase).toBe('ride-created');

    const retry = await runner.execute(plan, id, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 2, 'receipt-sent': 1 });
    expect(cards.calls).toBe(2);
    expect(cards.charges.size).toBe(1);
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('takes over a holder stalled in phase 3 once its lease ends; the stale phase 3 rolls back with its fenced complete', async () => {
    let entered!: () => void;
    const inPhase3 = new Promise<void>((resolve) => (entered = resolve));
    let resume!: () => void;
    const stalled = new Promise<void>((resolve) => (resume = resolve));
    const slow = ridePlan(rides, cards, {
      started: async (phase) => {
        if (phase !== 'receipt-sent') return;
        entered();
        await stalled;
      },
    });
    const stale = runner.execute(slow, id, INPUT);
    await inPhase3;
    // The stalled holder's lease is live: a retry is told to come back later.
    await expect(runner.execute(ridePlan(rides, cards), id, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
    clock.advance(LEASE_MS);
    const retry = await runner.execute(ridePlan(rides, cards), id, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
    resume();
    await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
    expect(cards.calls).toBe(1);
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    expect(body((await runner.execute(ridePlan(rides, cards), id, INPUT)).response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
  });

  it('runs a key once when 10 executions race: the others are told it is in flight or get the replay', async () => {
    const hooks = faults();
    const plan = ridePlan(rides, cards, hooks);
    const outcomes = await Promise.allSettled(Array.from({ length: 10 }, () => runner.execute(plan, id, INPUT)));
    const fresh = outcomes.filter((o) => o.status === 'fulfilled' && !o.value.replayed);
    const others = outcomes.filter((o) => !(o.status === 'fulfilled' && !o.value.replayed));
    expect(fresh).toHaveLength(1);
    for (const other of others) {
      if (other.status === 'rejected') expect(other.reason).toBeInstanceOf(RequestInProgressError);
      else expect(body(other.value.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    }
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
    expect(cards.calls).toBe(1);
    expect(await rows()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('lets the completer finish abandoned records without any client retry', async () => {
    const plan = ridePlan(rides, cards, faults({ at: 'started', phase: 'receipt-sent' }));
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
    // One millisecond apart, so the completer's oldest-lease-first order is fixed.
    clock.advance(1);
    const other = { scope: 'riders', key: 'ride-2', fingerprint: FP };
    const crashing = ridePlan(rides, cards, faults({ at: 'finished', phase: 'charged' }));
    await expect(runner.execute(crashing, other, { rider: 'bo', cents: 7 })).rejects.toThrow('crash');
    // A holder that died inside phase 1 with a live lease: not abandoned (no recovery point, lease live).
    const held = await store.claim({ scope: 'riders', key: 'ride-3', fingerprint: FP, leaseMs: LEASE_MS, retentionMs: 600_000 });
    expect(held.acquired).toBe(true);

    const report = await completeAbandoned({ runner, plans: [ridePlan(rides, cards)] });
    expect(report).toEqual({
      found: 2,
      completed: [
        { scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged' },
        { scope: 'riders', key: 'ride-2', plan: 'ride.create', phase: 'ride-created' },
      ],
      skipped: [],
      failed: [],
    });
    // ride-2 was re-driven from its stored input: 7 cents, under ride-2's derived key.
    expect(cards.charges.get(derivedKey(other, 'charge'))?.cents).toBe(7);
    expect(cards.charges.size).toBe(2);
    expect(await rows()).toEqual([
      { charge_id: 'ch_1', receipts: 1 },
      { charge_id: 'ch_2', receipts: 1 },
    ]);
    const late = await runner.execute(plan, id, INPUT);
    expect(late.replayed).toBe(true);
    expect(body(late.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(await completeAbandoned({ runner, plans: [plan] })).toEqual({ found: 0, completed: [], skipped: [], failed: [] });
    expect((await store.get('riders', 'ride-3'))?.state).toBe('in_progress');
  });
});
