/**
 * The saga simulation: seeded histories of booking sagas (`test/phases/fixtures/booking.ts`: reserve a
 * seat → charge the card → send the ticket, a refused step compensating the seat and the charge) on a real
 * store, in plain mode. Commands are client requests that may crash at any phase boundary, after any
 * foreign call or in any compensation (the execution hangs for ever, its lease held: a dead process), clock
 * moves, completer runs and an operator's resolution of a paused saga. After every step and at the end:
 * each reservation, charge, ticket, refund and release happened at most once per booking, a refund only
 * for a charge, a release only for a seat, and a saved answer matches what was done; at the end, once the
 * completer and the clients' retries have run out of work, every booking is `completed` or `compensated`,
 * or `compensation_failed` only when its refund is refused for ever.
 */
import fc from 'fast-check';
import { resolvedSaga } from '../../src/cli/compensation.js';
import { CompensationFailedError, RequestInProgressError } from '../../src/core/errors.js';
import type { StoredResponse } from '../../src/core/record.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import type { PhasePlan } from '../../src/phases/plan.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { sagaStatusOf } from '../../src/phases/saga.js';
import { BOOKING_POINTS, bookingPlan, FakeBookingApi, type BookingApi, type BookingInput } from '../phases/fixtures/booking.js';
import type { SimHarness } from './harness.js';

const BOOKINGS = 3;
const SCOPE = 'sim-saga';
const FP = 'a'.repeat(64);
const LEASE_MS = 30_000;
const MAX_COMPENSATION_ATTEMPTS = 3;

/** How the foreign API treats one booking. */
const SCENARIOS = ['ok', 'sold-out', 'decline', 'ticket-refused', 'refund-flaky', 'refund-forever'] as const;
type Scenario = (typeof SCENARIOS)[number];
const CRASH_POINTS = [...BOOKING_POINTS, 'ticket-sent:called'] as const;

/** Thrown when a history breaks an invariant. */
class SagaViolation extends Error {
  override readonly name = 'SagaViolation';
}

function violation(message: string): never {
  throw new SagaViolation(message);
}

/** The foreign API with a scenario per booking, told apart by the targets of its calls. */
class SimBookingApi extends FakeBookingApi {
  readonly scenarios = new Map<number, Scenario>();
  /** Bookings whose refund an operator made work again. */
  readonly healed = new Set<number>();
  private readonly flaky = new Map<number, number>();

  /** The booking a call is about: its seat, its cents, or the effect (reservation, charge) it targets. */
  bookingOf(op: string, target: string): number {
    if (op === 'reserve') return Number(target.slice('seat-'.length));
    if (op === 'charge') return Number(target) - 100;
    for (const effect of this.effects.values()) if (effect.id === target) return this.bookingOf(effect.op, effect.target);
    return -1;
  }

  protected override refusal(op: string, target: string): string | undefined {
    const booking = this.bookingOf(op, target);
    const scenario = this.scenarios.get(booking) ?? 'ok';
    if (op === 'reserve' && scenario === 'sold-out') return 'sold out';
    if (op === 'charge' && scenario === 'decline') return 'card declined';
    if (op === 'ticket' && ['ticket-refused', 'refund-flaky', 'refund-forever'].includes(scenario)) return 'ticket refused';
    if (op === 'refund' && scenario === 'refund-forever' && !this.healed.has(booking)) return 'refund refused';
    if (op === 'refund' && scenario === 'refund-flaky') {
      const refused = this.flaky.get(booking) ?? 0;
      if (refused < MAX_COMPENSATION_ATTEMPTS - 1) {
        this.flaky.set(booking, refused + 1);
        return 'refund refused (flaky)';
      }
    }
    return undefined;
  }

  /** Effects of `op` applied for `booking`. */
  count(op: string, booking: number): number {
    let n = 0;
    for (const effect of this.effects.values()) if (effect.op === op && this.bookingOf(effect.op, effect.target) === booking) n++;
    return n;
  }
}

/** A defect the simulation must catch: a compensation that sends a new idempotency key on every attempt. */
export type SagaDefect = 'refund-new-key';

/** What the history has done so far. */
class SagaModel {
  readonly api = new SimBookingApi();
  /** How the plan reaches the API: directly, or through the defect. */
  readonly calls: BookingApi;
  /** Bookings an operator marked compensated by hand (their pending compensations never run). */
  readonly settled = new Set<number>();
  constructor(
    readonly store: IdempotencyStore,
    readonly runner: PhaseRunner,
    readonly advance: (ms: number) => void,
    defect: SagaDefect | undefined,
  ) {
    let attempt = 0;
    this.calls = defect === undefined ? this.api : { call: (op, key, target) => this.api.call(op, op === 'refund' ? `${key}:${++attempt}` : key, target) };
  }
}

const decoder = new TextDecoder();
const idOf = (booking: number) => ({ scope: SCOPE, key: `booking-${booking}`, fingerprint: FP });
const inputOf = (booking: number): BookingInput => ({ seat: `seat-${booking}`, cents: 100 + booking });

/** Runs `work` with the booking plan, hanging it for ever at `crashAt`; resolves when it ended or crashed. */
async function withCrash<T>(
  m: SagaModel,
  crashAt: string | undefined,
  work: (plan: PhasePlan<undefined, BookingInput>) => Promise<T>,
): Promise<PromiseSettledResult<T> | 'crashed'> {
  let crashed!: () => void;
  const dead = new Promise<'crashed'>((resolve) => (crashed = () => resolve('crashed')));
  const plan = bookingPlan<undefined>(m.calls, (point) => {
    if (point !== crashAt) return;
    crashed();
    return new Promise<void>(() => undefined);
  });
  const settled = work(plan).then(
    (value): PromiseSettledResult<T> => ({ status: 'fulfilled', value }),
    (reason: unknown): PromiseSettledResult<T> => ({ status: 'rejected', reason }),
  );
  return Promise.race([settled, dead]);
}

/** An error a booking request may end in: a live holder, a paused saga, or a compensation attempt refused. */
function expected(error: unknown): boolean {
  return error instanceof RequestInProgressError || error instanceof CompensationFailedError || (error instanceof Error && error.message.startsWith('compensation refused'));
}

/** Checks a saved or fresh answer of `booking` against what its API did. */
function checkAnswer(m: SagaModel, booking: number, response: StoredResponse, how: string): void {
  const scenario = m.api.scenarios.get(booking) ?? 'ok';
  const body = decoder.decode(response.body);
  if (scenario === 'ok') {
    if (response.status !== 201) violation(`${how}: booking ${booking} (ok) answered ${response.status} ${body}`);
    if (m.api.count('ticket', booking) !== 1) violation(`${how}: booking ${booking} answered 201 without its ticket`);
    return;
  }
  if (response.status !== 402) violation(`${how}: booking ${booking} (${scenario}) answered ${response.status} ${body}`);
  if (m.settled.has(booking)) return;
  if (m.api.count('refund', booking) !== m.api.count('charge', booking)) violation(`${how}: booking ${booking} compensated without refunding its charge`);
  if (m.api.count('release', booking) !== m.api.count('reserve', booking)) violation(`${how}: booking ${booking} compensated without releasing its seat`);
}

/** The at-most-once invariants of every booking's foreign effects. */
function checkEffects(m: SagaModel, how: string): void {
  for (let booking = 0; booking < BOOKINGS; booking++) {
    const n = (op: string): number => m.api.count(op, booking);
    for (const op of ['reserve', 'charge', 'ticket', 'refund', 'release']) {
      if (n(op) > 1) violation(`${how}: booking ${booking}: ${op} applied ${n(op)} times`);
    }
    if (n('refund') > n('charge')) violation(`${how}: booking ${booking}: a refund without a charge`);
    if (n('release') > n('reserve')) violation(`${how}: booking ${booking}: a release without a reservation`);
    if (n('ticket') > 0 && n('refund') + n('release') > 0) violation(`${how}: booking ${booking}: compensated although its ticket was sent`);
  }
}

type SagaCmd = fc.AsyncCommand<SagaModel, SagaModel>;

/** A client's request for a booking (the first one picks the booking's scenario), maybe crashing. */
class BookCmd implements SagaCmd {
  constructor(
    readonly booking: number,
    readonly scenario: Scenario,
    readonly crashAt: string | undefined,
  ) {}
  check = (): boolean => true;
  async run(m: SagaModel): Promise<void> {
    if (!m.api.scenarios.has(this.booking)) m.api.scenarios.set(this.booking, this.scenario);
    const ended = await withCrash(m, this.crashAt, (plan) => m.runner.execute(plan, idOf(this.booking), inputOf(this.booking)));
    const how = String(this);
    checkEffects(m, how);
    if (ended !== 'crashed' && ended.status === 'fulfilled') checkAnswer(m, this.booking, ended.value.response, how);
    if (ended !== 'crashed' && ended.status === 'rejected' && !expected(ended.reason)) violation(`${how}: unexpected ${String(ended.reason)}`);
  }
  toString(): string {
    return `book ${this.booking} ${this.scenario}${this.crashAt === undefined ? '' : ` crash@${this.crashAt}`}`;
  }
}

class AdvanceCmd implements SagaCmd {
  constructor(readonly ms: number) {}
  check = (): boolean => true;
  run(m: SagaModel): Promise<void> {
    m.advance(this.ms);
    return Promise.resolve();
  }
  toString(): string {
    return `advance ${this.ms}`;
  }
}

/** One completer run, which may itself crash. */
class CompleteCmd implements SagaCmd {
  constructor(readonly crashAt: string | undefined) {}
  check = (): boolean => true;
  async run(m: SagaModel): Promise<void> {
    const ended = await withCrash(m, this.crashAt, (plan) => completeAbandoned({ runner: m.runner, plans: [plan] }));
    if (ended !== 'crashed' && ended.status === 'rejected') violation(`${String(this)}: ${String(ended.reason)}`);
    if (ended !== 'crashed' && ended.status === 'fulfilled') {
      for (const failure of ended.value.failed) if (!expected(failure.error)) violation(`${String(this)}: ${failure.key} failed: ${String(failure.error)}`);
    }
    checkEffects(m, String(this));
  }
  toString(): string {
    return `complete${this.crashAt === undefined ? '' : ` crash@${this.crashAt}`}`;
  }
}

/** An operator resolves a booking's paused saga: fixes the refund and retries, or marks it compensated. */
class OperatorCmd implements SagaCmd {
  constructor(
    readonly booking: number,
    readonly action: 'retry' | 'mark-compensated',
  ) {}
  check = (): boolean => true;
  async run(m: SagaModel): Promise<void> {
    const id = idOf(this.booking);
    const record = await m.store.get(id.scope, id.key);
    const point = record?.recoveryPoint === undefined ? undefined : decodeRecoveryPoint(record.recoveryPoint);
    if (record?.state !== 'in_progress' || point?.saga?.status !== 'compensation_failed') return;
    if (this.action === 'retry') m.api.healed.add(this.booking);
    else m.settled.add(this.booking);
    const holder = { ...id, leaseToken: record.leaseToken, leaseExpiresAt: record.leaseExpiresAt, takeover: false };
    if ((await m.store.checkpoint?.(holder, resolvedSaga({ ...point, saga: point.saga }, this.action), 0)) === undefined) {
      violation(`${String(this)}: the paused saga's checkpoint was refused`);
    }
  }
  toString(): string {
    return `operator ${this.action} ${this.booking}`;
  }
}

/** The commands a saga history is made of; `replayPath` replays a shrunk one. */
export function sagaCommands(maxCommands = 14, replayPath?: string): fc.Arbitrary<Iterable<SagaCmd>> {
  const booking = fc.integer({ min: 0, max: BOOKINGS - 1 });
  // A crash in one request of three.
  const crash = fc.oneof(fc.constant(undefined), fc.constant(undefined), fc.constantFrom(...CRASH_POINTS));
  const book = fc.tuple(booking, fc.constantFrom(...SCENARIOS), crash).map(([b, s, c]) => new BookCmd(b, s, c));
  return fc.commands(
    [
      book,
      book,
      book,
      fc.constantFrom(1_000, LEASE_MS + 1).map((ms) => new AdvanceCmd(ms)),
      fc.constantFrom(1_000, LEASE_MS + 1).map((ms) => new AdvanceCmd(ms)),
      crash.map((c) => new CompleteCmd(c)),
      fc.tuple(booking, fc.constantFrom('retry' as const, 'mark-compensated' as const)).map(([b, a]) => new OperatorCmd(b, a)),
    ],
    { maxCommands, size: 'max', ...(replayPath === undefined ? {} : { replayPath }) },
  );
}

/** Runs one saga history on the harness's store (reset first), then drives every booking to its end. */
export async function runSagaHistory(harness: SimHarness, commands: Iterable<SagaCmd>, defect?: SagaDefect): Promise<void> {
  await harness.reset();
  const { store } = harness;
  const runner = createPhaseRunner({ store, leaseMs: LEASE_MS, maxCompensationAttempts: MAX_COMPENSATION_ATTEMPTS });
  const m = new SagaModel(store, runner, (ms) => harness.advance(ms), defect);
  await fc.asyncModelRun(() => ({ model: m, real: m }), commands);

  // No crash from here on: leases run out, the completer and the clients retry until nothing changes.
  const plan = bookingPlan<undefined>(m.calls);
  for (let round = 0; round < 4; round++) {
    harness.advance(LEASE_MS + 1);
    const report = await completeAbandoned({ runner, plans: [plan] });
    for (const failure of report.failed) if (!expected(failure.error)) violation(`final completer: ${failure.key} failed: ${String(failure.error)}`);
    for (const booking of m.api.scenarios.keys()) {
      const outcome = await runner.execute(plan, idOf(booking), inputOf(booking)).catch((error: unknown) => error);
      checkEffects(m, `final retry of booking ${booking}`);
      if (outcome instanceof Error) {
        if (!expected(outcome)) violation(`final retry of booking ${booking}: ${String(outcome)}`);
      } else checkAnswer(m, booking, (outcome as { response: StoredResponse }).response, `final retry of booking ${booking}`);
    }
  }
  checkEffects(m, 'the end');
  for (const [booking, scenario] of m.api.scenarios) {
    const record = await store.get(SCOPE, `booking-${booking}`);
    const status = record === undefined ? 'missing' : (sagaStatusOf(record) ?? record.state);
    const ended = status === 'completed' || status === 'compensated';
    const stuck = status === 'compensation_failed' && scenario === 'refund-forever' && !m.api.healed.has(booking);
    if (!ended && !stuck) violation(`the end: booking ${booking} (${scenario}) is ${status}`);
    if (status === 'completed' && scenario !== 'ok') violation(`the end: booking ${booking} (${scenario}) completed forward`);
  }
}
