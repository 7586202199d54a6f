/**
 * The atomic-phases contract: what every store that supports phases (memory, SQLite, PostgreSQL, Redis)
 * guarantees under the phase runner, in plain mode (each phase alone, then a fenced checkpoint) and, where
 * the store has transactions, in transactional mode (each phase's writes and its checkpoint commit
 * together). The plan is the three-phase ride of `fixtures/ride-plan.ts`; a fault injector crashes it at
 * chosen points and a deduplicating card network counts the charges.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyReusedError, LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { definePhases, type PhasePlan } from '../../src/phases/plan.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import type { PhaseRunner } from '../../src/phases/runner.js';
import { body, FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import type { CardNetwork, RideHooks, RideInput } from './fixtures/ride-plan.js';

/** One row of the rides table, as the tests compare them. */
export interface RideRow {
  readonly charge_id: string | null;
  readonly receipts: number;
}

/** A fresh, empty store with its runner, for one test. */
export interface PhaseSubject<Tx> {
  readonly store: IdempotencyStore;
  /** A runner over `store` with `leaseMs: LEASE_MS`, in the suite's mode. */
  readonly runner: PhaseRunner<Tx>;
  /** The store's clock. */
  readonly clock: ManualClock;
  /** The ride plan writing to this subject's rides table. */
  plan(cards: CardNetwork, hooks?: RideHooks): PhasePlan<Tx, RideInput>;
  /** The rides table, in insertion order. */
  rides(): Promise<RideRow[]>;
  close(): Promise<void>;
}

/**
 * Registers the contract for one store in one mode. `open` is called before every test.
 *
 * @param mode.transactional - whether `open`'s runner is in transactional mode; a few guarantees (a failed
 *   phase's writes roll back) hold only there, and one (a stale worker's phase still writes) only in plain mode
 * @param mode.concurrentTransactions - whether a second transaction can open while one stalls (PostgreSQL;
 *   not SQLite, whose one connection serializes them), so a retry can take over a stalled holder
 */
export function phasesContract<Tx>(
  name: string,
  mode: { readonly transactional: boolean; readonly concurrentTransactions?: boolean },
  open: () => Promise<PhaseSubject<Tx>>,
): void {
  const { transactional } = mode;
  describe(`atomic phases on ${name}, ${transactional ? 'transactional' : 'plain'} mode`, () => {
    let subject: PhaseSubject<Tx>;
    let store: IdempotencyStore;
    let runner: PhaseRunner<Tx>;
    let clock: ManualClock;
    let cards: FakeCards;
    const ridePlan = (network: CardNetwork, hooks?: RideHooks): PhasePlan<Tx, RideInput> => subject.plan(network, hooks);
    const rides = (): Promise<RideRow[]> => subject.rides();
    const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };

    beforeEach(async () => {
      subject = await open();
      ({ store, runner, clock } = subject);
      cards = new FakeCards();
    });
    afterEach(async () => {
      await subject.close();
    });

    it('runs the three phases once, charges once and replays the saved response', async () => {
      const hooks = faults();
      const plan = ridePlan(cards, hooks);
      const first = await runner.execute(plan, id, INPUT);
      expect(first).toMatchObject({ replayed: false });
      expect(first.resumedFrom).toBeUndefined();
      expect(first.response.status).toBe(201);
      expect(body(first.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      const replay = await runner.execute(plan, id, INPUT);
      expect(replay.replayed).toBe(true);
      expect(body(replay.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
      expect(cards.calls).toBe(1);
      expect([...cards.charges.keys()]).toEqual([derivedKey(id, 'charge')]);
      expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      const record = await store.get('riders', 'ride-1');
      expect(record?.state).toBe('completed');
      expect(decodeRecoveryPoint(record?.recoveryPoint ?? '')).toMatchObject({ plan: 'ride.create', phase: 'charged' });
    });

    it('resumes at phase 3 after a crash that followed phase 2’s checkpoint, charging exactly once', async () => {
      const hooks = faults({ at: 'started', phase: 'receipt-sent' });
      const plan = ridePlan(cards, hooks);
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash started receipt-sent');

      // Phases 1 and 2 are recorded with their recovery point; the failed run handed its lease back.
      const stranded = await store.get('riders', 'ride-1');
      expect(stranded).toMatchObject({ state: 'in_progress', leaseExpiresAt: clock.now() });
      expect(decodeRecoveryPoint(stranded?.recoveryPoint ?? '')).toEqual({
        plan: 'ride.create',
        phase: 'charged',
        input: INPUT,
        state: { rowid: 1, chargeId: 'ch_1' },
      });
      expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 0 }]);

      // The zero-lease hand-back lets the retry take over in the same millisecond.
      const retry = await runner.execute(plan, id, INPUT);
      expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
      expect(body(retry.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 2 });
      expect((await runner.execute(plan, id, INPUT)).replayed).toBe(true);
      expect(cards.calls).toBe(1);
      expect(cards.charges.size).toBe(1);
      expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    });

    it('runs a key once when 10 executions race: the others are told it is in flight or get the replay', async () => {
      const hooks = faults();
      const plan = ridePlan(cards, hooks);
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
      expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    });

    it('lets the completer finish abandoned records without any client retry', async () => {
      const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }));
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
      // One millisecond apart, so the completer's oldest-lease-first order is fixed.
      clock.advance(1);
      const other = { scope: 'riders', key: 'ride-2', fingerprint: FP };
      // In transactional mode the crash comes after phase 2's foreign charge, whose row update rolls back.
      const crashing = ridePlan(cards, faults({ at: transactional ? 'finished' : 'started', phase: 'charged' }));
      await expect(runner.execute(crashing, other, { rider: 'bo', cents: 7 })).rejects.toThrow('crash');
      // Not abandoned: a live lease without a recovery point.
      const held = await store.claim({ scope: 'riders', key: 'ride-3', fingerprint: FP, leaseMs: LEASE_MS, retentionMs: 600_000 });
      expect(held.acquired).toBe(true);

      const report = await completeAbandoned({ runner, plans: [ridePlan(cards)] });
      expect(report).toEqual({
        found: 2,
        completed: [
          { scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged' },
          { scope: 'riders', key: 'ride-2', plan: 'ride.create', phase: 'ride-created' },
        ],
        compensated: [],
        paused: [],
        skipped: [],
        failed: [],
      });
      // ride-2 was re-driven from its stored input: 7 cents, under ride-2's derived key.
      expect(cards.charges.get(derivedKey(other, 'charge'))?.cents).toBe(7);
      expect(cards.charges.size).toBe(2);
      expect(await rides()).toEqual([
        { charge_id: 'ch_1', receipts: 1 },
        { charge_id: 'ch_2', receipts: 1 },
      ]);
      const late = await runner.execute(plan, id, INPUT);
      expect(late.replayed).toBe(true);
      expect(body(late.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(await completeAbandoned({ runner, plans: [plan] })).toEqual({ found: 0, completed: [], compensated: [], paused: [], skipped: [], failed: [] });
      expect((await store.get('riders', 'ride-3'))?.state).toBe('in_progress');
    });

    it('has the completer skip a record of an unknown plan and one whose lease is still live', async () => {
      const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }));
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
      const other = definePhases<Tx>({ id: 'something.else', phases: [{ name: 'only', run: () => Promise.resolve(1) }] });
      const report = await completeAbandoned({ runner, plans: [other] });
      expect(report.skipped).toEqual([{ scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged', reason: 'unknown-plan' }]);
      expect((await store.get('riders', 'ride-1'))?.state).toBe('in_progress');
      // A plain claim with a live lease makes the record not abandoned at all.
      const held = await store.claim({ scope: 'riders', key: 'ride-1', fingerprint: FP, leaseMs: LEASE_MS, retentionMs: 600_000 });
      expect(held.acquired).toBe(true);
      expect((await completeAbandoned({ runner, plans: [plan] })).found).toBe(0);
    });

    it('refuses another plan resuming the record, and a different fingerprint, leaving the record resumable', async () => {
      const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }));
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
      const other = definePhases<Tx, RideInput>({ id: 'something.else', phases: [{ name: 'only', run: () => Promise.resolve(1) }] });
      await expect(runner.execute(other, id, INPUT)).rejects.toThrow(/cannot resume/);
      await expect(runner.execute(plan, { ...id, fingerprint: 'e'.repeat(64) }, INPUT)).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
      expect((await runner.execute(plan, id, INPUT)).resumedFrom).toBe('charged');
    });

    if (transactional) {
      it('rolls back a phase that failed before its checkpoint; the retry re-runs it and the derived key dedups the charge', async () => {
        const hooks = faults({ at: 'finished', phase: 'charged' });
        const plan = ridePlan(cards, hooks);
        await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash finished charged');
        // The card was charged, but phase 2's UPDATE rolled back with its transaction (and its checkpoint).
        expect(cards.charges.size).toBe(1);
        expect(await rides()).toEqual([{ charge_id: null, receipts: 0 }]);
        expect(decodeRecoveryPoint((await store.get('riders', 'ride-1'))?.recoveryPoint ?? '')?.phase).toBe('ride-created');

        const retry = await runner.execute(plan, id, INPUT);
        expect(retry).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
        expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 2, 'receipt-sent': 1 });
        expect(cards.calls).toBe(2);
        expect(cards.charges.size).toBe(1);
        expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      });

      it('releases a record whose first phase failed: no row, no record, and a retry starts afresh', async () => {
        const hooks = faults({ at: 'finished', phase: 'ride-created' });
        const plan = ridePlan(cards, hooks);
        await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash finished ride-created');
        expect(await rides()).toEqual([]);
        expect(await store.get('riders', 'ride-1')).toBeUndefined();
        const retry = await runner.execute(plan, id, INPUT);
        expect(retry.resumedFrom).toBeUndefined();
        expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      });

    }
    if (transactional && mode.concurrentTransactions === true) {
      it('takes over a holder stalled in phase 3 once its lease ends; the stale phase 3 rolls back with its fenced complete', async () => {
        let entered!: () => void;
        const inPhase3 = new Promise<void>((resolve) => (entered = resolve));
        let resume!: () => void;
        const stalled = new Promise<void>((resolve) => (resume = resolve));
        const slow = ridePlan(cards, {
          started: async (phase) => {
            if (phase !== 'receipt-sent') return;
            entered();
            await stalled;
          },
        });
        const stale = runner.execute(slow, id, INPUT);
        await inPhase3;
        // The stalled holder's lease is live: a retry is told to come back later.
        await expect(runner.execute(ridePlan(cards), id, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
        clock.advance(LEASE_MS);
        const retry = await runner.execute(ridePlan(cards), id, INPUT);
        expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
        resume();
        await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
        expect(cards.calls).toBe(1);
        expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
        expect(body((await runner.execute(ridePlan(cards), id, INPUT)).response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      });
    }
    if (!transactional) {
      it('fences off a stale worker’s checkpoint after a takeover; the charge still happens once', async () => {
        let stall: (() => void) | undefined;
        let entered!: () => void;
        const inPhase2 = new Promise<void>((resolve) => (entered = resolve));
        const slow = ridePlan(cards, {
          finished: async (phase) => {
            if (phase !== 'charged' || stall !== undefined) return;
            entered();
            await new Promise<void>((resolve) => (stall = resolve));
          },
        });
        const stale = runner.execute(slow, id, INPUT);
        await inPhase2;
        await expect(runner.execute(ridePlan(cards), id, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
        clock.advance(LEASE_MS);
        const winner = await runner.execute(ridePlan(cards), id, INPUT);
        expect(winner).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
        stall?.();
        await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
        const record = await store.get('riders', 'ride-1');
        expect(record?.state).toBe('completed');
        expect(body(record?.response ?? { body: new Uint8Array() })).toEqual({ rowid: 1, chargeId: 'ch_1' });
        expect(cards.charges.size).toBe(1);
        expect(await rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      });
    }
  });
}
