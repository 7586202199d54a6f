/**
 * The saga contract: what every store that supports phases guarantees for a plan whose phase fails
 * terminally — the compensations of the committed phases run newest first, once each under their own
 * derived key, across failures and resumes, and the compensated response is saved and replayed; a
 * compensation that gives up pauses the saga for an operator. The plan is the booking saga of
 * `fixtures/booking.ts` against a counting foreign API.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolvedSaga } from '../../src/cli/compensation.js';
import type { ManualClock } from '../../src/core/clock.js';
import { CompensationFailedError, RequestInProgressError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import type { PhaseRunner } from '../../src/phases/runner.js';
import { sagaStatusOf } from '../../src/phases/saga.js';
import { body, FP } from './fixtures/ride-fakes.js';
import { BOOKING_POINTS, bookingPlan, FakeBookingApi, type BookingInput } from './fixtures/booking.js';

/** A fresh, empty store for one test, and runners over it in the suite's mode. */
export interface SagaSubject<Tx> {
  readonly store: IdempotencyStore;
  readonly clock: ManualClock;
  /** A runner over `store` in the suite's mode, giving a compensation `maxCompensationAttempts` attempts. */
  runner(maxCompensationAttempts: number): PhaseRunner<Tx>;
  close(): Promise<void>;
}

const INPUT: BookingInput = { seat: '12A', cents: 4_200 };

/** Registers the saga contract for one store in one mode; `open` is called before every test. */
export function sagaContract<Tx>(name: string, mode: { readonly transactional: boolean }, open: () => Promise<SagaSubject<Tx>>): void {
  describe(`sagas on ${name}, ${mode.transactional ? 'transactional' : 'plain'} mode`, () => {
    let subject: SagaSubject<Tx>;
    let api: FakeBookingApi;
    const id = { scope: 'travellers', key: 'booking-1', fingerprint: FP };

    beforeEach(async () => {
      subject = await open();
      api = new FakeBookingApi();
    });
    afterEach(async () => {
      await subject.close();
    });

    it('compensates the seat once when the card is declined, and replays the saved 402', async () => {
      const runner = subject.runner(5);
      const plan = bookingPlan<Tx>(api.refuse('charge'));
      const first = await runner.execute(plan, id, INPUT);
      expect(first).toMatchObject({ replayed: false, outcome: 'compensated' });
      expect(first.response.status).toBe(402);
      expect(body(first.response)).toEqual({ error: 'charge refused', phase: 'card-charged' });
      const replay = await runner.execute(plan, id, INPUT);
      expect(replay).toMatchObject({ replayed: true, outcome: 'compensated' });
      expect(body(replay.response)).toEqual(body(first.response));
      expect(api.applied('reserve')).toBe(1);
      expect(api.applied('charge')).toBe(0);
      expect(api.applied('release', 'reserve_1')).toBe(1);
      expect(api.calls.get(derivedKey(id, 'compensate:seat-reserved'))).toBe(1);
      const record = await subject.store.get(id.scope, id.key);
      expect(record?.state).toBe('completed');
      expect(sagaStatusOf(record ?? {})).toBe('compensated');
    });

    it('refunds, then releases, when the ticket is refused; a seat sold out compensates nothing', async () => {
      const runner = subject.runner(5);
      const order: string[] = [];
      const plan = bookingPlan<Tx>(api.refuse('ticket'), (point) => void (point.endsWith(':called') && order.push(point)));
      expect((await runner.execute(plan, id, INPUT)).outcome).toBe('compensated');
      expect(order).toEqual(['seat-reserved:called', 'card-charged:called', 'compensate:card-charged:called', 'compensate:seat-reserved:called']);
      expect(api.applied('refund', 'charge_2')).toBe(1);
      expect(api.applied('release', 'reserve_1')).toBe(1);

      const soldOut = { ...id, key: 'booking-2' };
      const none = await runner.execute(bookingPlan<Tx>(new FakeBookingApi().refuse('reserve')), soldOut, INPUT);
      expect(none).toMatchObject({ outcome: 'compensated', replayed: false });
      expect(body(none.response)).toEqual({ error: 'reserve refused', phase: 'seat-reserved' });
      expect((await runner.execute(bookingPlan<Tx>(new FakeBookingApi()), soldOut, INPUT)).replayed).toBe(true);
    });

    it('resumes a compensation that failed or crashed after its foreign call, each compensation happening once', async () => {
      const runner = subject.runner(5);
      for (const point of BOOKING_POINTS.filter((p) => p.startsWith('compensate:'))) {
        const booking = { ...id, key: `crash-${point}` };
        const calls = new FakeBookingApi().refuse('ticket');
        let armed = true;
        const crashing = bookingPlan<Tx>(calls, (at) => {
          if (armed && at === point) {
            armed = false;
            throw new Error(`crash at ${at}`);
          }
        });
        await expect(runner.execute(crashing, booking, INPUT)).rejects.toThrow(`crash at ${point}`);
        const stranded = await subject.store.get(booking.scope, booking.key);
        expect(stranded?.state).toBe('in_progress');
        expect(sagaStatusOf(stranded ?? {})).toBe('compensating');
        const report = await completeAbandoned({ runner, plans: [bookingPlan(calls)] });
        expect(report.compensated).toEqual([{ scope: 'travellers', key: booking.key, plan: 'booking.create', phase: 'card-charged', saga: 'compensating' }]);
        expect(calls.applied('refund')).toBe(1);
        expect(calls.applied('release')).toBe(1);
        for (const step of ['compensate:card-charged', 'compensate:seat-reserved']) {
          expect(calls.calls.get(derivedKey(booking, step)), `${point}: ${step}`).toBeLessThanOrEqual(2);
        }
        expect((await runner.execute(bookingPlan<Tx>(calls), booking, INPUT)).replayed).toBe(true);
      }
    });

    it('pauses a saga whose refund is refused for ever; an operator retries it, or marks it compensated', async () => {
      const runner = subject.runner(2);
      const plan = bookingPlan<Tx>(api.refuse('ticket').refuse('refund'));
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('compensation refused: refund refused');
      const failure = await runner.execute(plan, id, INPUT).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(CompensationFailedError);
      expect(failure).toMatchObject({ code: 'saga-compensation-failed', phase: 'card-charged' });
      const paused = await subject.store.get(id.scope, id.key);
      expect(paused?.state).toBe('in_progress');
      expect(decodeRecoveryPoint(paused?.recoveryPoint ?? '')?.saga).toMatchObject({
        status: 'compensation_failed',
        pending: ['card-charged', 'seat-reserved'],
        attempts: 2,
        lastError: 'compensation refused: refund refused',
      });
      // Paused, not looping: retries are told it is in progress, and the completer does not see it.
      await expect(runner.execute(plan, id, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
      subject.clock.advance(3_600_000);
      expect((await completeAbandoned({ runner, plans: [plan] })).found).toBe(0);

      // The operator retries once the refund works again: the saga resumes and finishes.
      const holder = { ...id, leaseToken: paused?.leaseToken ?? '', leaseExpiresAt: 0, takeover: false };
      const point = decodeRecoveryPoint(paused?.recoveryPoint ?? '');
      if (point?.saga === undefined) throw new Error('no saga');
      expect(await subject.store.checkpoint?.(holder, resolvedSaga({ ...point, saga: point.saga }, 'retry'), 0)).toBeDefined();
      const healed = new FakeBookingApi();
      for (const [key, effect] of api.effects) healed.effects.set(key, effect);
      const report = await completeAbandoned({ runner, plans: [bookingPlan(healed)] });
      expect(report.compensated).toHaveLength(1);
      expect(healed.applied('refund')).toBe(1);
      expect(healed.applied('release')).toBe(1);

      // A second saga paused the same way is marked compensated by hand: nothing more runs.
      const other = { ...id, key: 'booking-2' };
      const stuck = new FakeBookingApi().refuse('ticket').refuse('release');
      const plan2 = bookingPlan<Tx>(stuck);
      await expect(runner.execute(plan2, other, INPUT)).rejects.toThrow();
      await expect(runner.execute(plan2, other, INPUT)).rejects.toBeInstanceOf(CompensationFailedError);
      const record = await subject.store.get(other.scope, other.key);
      const at = decodeRecoveryPoint(record?.recoveryPoint ?? '');
      if (at?.saga === undefined) throw new Error('no saga');
      expect(at.saga.pending).toEqual(['seat-reserved']);
      const owner = { ...other, leaseToken: record?.leaseToken ?? '', leaseExpiresAt: 0, takeover: false };
      await subject.store.checkpoint?.(owner, resolvedSaga({ ...at, saga: at.saga }, 'mark-compensated'), 0);
      const settled = await runner.execute(plan2, other, INPUT);
      expect(settled).toMatchObject({ outcome: 'compensated', replayed: false });
      expect(decodeRecoveryPoint((await subject.store.get(other.scope, other.key))?.recoveryPoint ?? '')?.saga).toMatchObject({
        status: 'compensated',
        settled: ['seat-reserved'],
      });
      expect(stuck.applied('release')).toBe(0);
    });
  });
}
