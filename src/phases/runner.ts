/**
 * The phase runner: runs a {@link PhasePlan} once per (scope, key), one phase at a time, each phase ending
 * in a recovery point saved with the store's fenced `checkpoint` (in the same transaction as the phase's
 * writes in transactional mode), and the last one in the saved response. A retry, a takeover after a
 * crash, or the completer resumes after the last recovery point, so committed phases never run twice.
 *
 * Source: Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres" (atomic phases, recovery
 * points, foreign state mutations under a derived idempotency key). See docs/phases.md.
 *
 * @module
 */
import { derivedKey } from './derived-key.js';
import {
  IdempotencyError,
  LeaseLostError,
  RecoveryPointUnresumableError,
  RequestInProgressError,
  StoreUnavailableError,
  TerminalPhaseError,
} from '../core/errors.js';
import { PhaseFailed, type HandBack } from './phase-failed.js';
import { checkPlan, type Phase, type PhaseContext, type PhasePlan } from './plan.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../core/record.js';
import type { OperationId } from '../core/receiver.js';
import { decodeRecoveryPoint, encodeRecoveryPoint, type RecoveryPoint } from './recovery-point.js';
import { beginSaga, sagaStatusOf, sagaStep } from './saga.js';
import { answerStanding } from '../core/standing.js';
import { claimInputOf, type IdempotencyStore, type TransactionalStore, type TransactionView } from '../core/store.js';
import { describe, requireAtMost, requireCount, requireDurationMs, requireIdempotencyStore, requireOptions } from '../core/validate.js';

/** Options shared by every phase runner. Durations are in milliseconds. */
export interface PhaseRunnerOptions {
  /**
   * The lease taken by the claim and renewed by every checkpoint: each phase must finish within it, or a
   * retry may take the record over (the late phase's checkpoint is then fenced off). @defaultValue 30_000
   */
  readonly leaseMs?: number;
  /** How long a completed record is kept and replayed. @defaultValue 86_400_000 */
  readonly retentionMs?: number;
  /**
   * Attempts a saga's compensation gets before it gives up and the saga pauses as `compensation_failed`
   * for an operator (see `CompensationFailedError`). @defaultValue 5
   */
  readonly maxCompensationAttempts?: number;
}

/** Options of a runner over a plain store: each phase runs alone, then a fenced checkpoint records it. */
export interface PlainPhaseRunnerOptions extends PhaseRunnerOptions {
  readonly store: IdempotencyStore;
  readonly transactional?: false;
}

/** Options of a runner in transactional mode: each phase's writes and its checkpoint commit together. */
export interface TransactionalPhaseRunnerOptions<Tx> extends PhaseRunnerOptions {
  readonly store: TransactionalStore<Tx>;
  readonly transactional: true;
}

/** The outcome of {@link PhaseRunner.execute}. */
export interface PhasedExecution {
  /** The response to send: the fresh one, or the saved one on a replay. */
  readonly response: StoredResponse;
  /** `true` when this is the saved response of an earlier execution (no phase ran). */
  readonly replayed: boolean;
  /** The recovery point (a phase name) this execution resumed after; absent when it started at the first phase. */
  readonly resumedFrom?: string;
  /**
   * `completed`: the plan ran to its last phase; `compensated`: a phase failed terminally and the saga's
   * compensations ran (the response is the plan's compensated response). Also told on a replay.
   */
  readonly outcome: 'completed' | 'compensated';
}

/** Runs plans of atomic phases. Create one with {@link createPhaseRunner}. */
export interface PhaseRunner<Tx = undefined> {
  /** The resolved, frozen options. */
  readonly options: Readonly<Required<PhaseRunnerOptions>> & { readonly transactional: boolean };
  readonly store: IdempotencyStore;
  /**
   * Runs `plan` for the operation `id` with `input`: claims the key, then runs the phases after the
   * record's recovery point (all of them on a new record), one transaction (or one fenced checkpoint) per
   * phase, and saves the last phase's response. A completed record is replayed without running anything.
   * On a resume, `context.input` is the input stored with the recovery point, not this call's `input`.
   *
   * When a phase throws: a record without a recovery point is released (a retry starts afresh; in
   * transactional mode the phase's writes are rolled back); a record with one is kept and its lease ended
   * at once (checkpoint with a zero lease), so the next retry — or the completer — takes it over and
   * resumes at the failed phase. It is never released, since its committed phases must not run again.
   *
   * @throws {@link IdempotencyKeyReusedError} — the key is held by a request with another fingerprint (422)
   * @throws {@link RequestInProgressError} — another execution holds a live lease on the key (409)
   * @throws {@link LeaseLostError} — the lease was taken over mid-run; the phase's checkpoint (or the
   *   response) was fenced off (409)
   * @throws {@link StoreUnavailableError} — the store failed (503)
   * @throws {@link RecoveryPointUnresumableError} — the record is at a recovery point this plan does not know (another plan id, or a phase
   *   name the plan no longer has); the record is left for a runner that knows it
   * When a phase throws {@link TerminalPhaseError}, the operation turns back as a saga: the `compensate`
   * of each committed phase runs, newest first, each in its own transaction with its own recovery point,
   * and the plan's compensated response is saved (`outcome: 'compensated'`). A compensation that throws is
   * handed back like a failed phase (the next retry or the completer resumes it); after
   * `maxCompensationAttempts`, or on a `TerminalPhaseError`, the saga pauses for an operator.
   *
   * @throws {@link CompensationFailedError} — a compensation gave up; the saga is `compensation_failed`
   * @throws whatever a phase or a compensation throws, after the release or hand-back above
   */
  execute<Input>(plan: PhasePlan<Tx, Input>, id: OperationId, input: Input): Promise<PhasedExecution>;
}

/**
 * Creates a phase runner over a store that has `checkpoint`.
 *
 * @throws TypeError naming the option when an option is invalid: `store` without `checkpoint` (the error
 *   names the store), `transactional: true` on a store without `transaction`, `leaseMs`/`retentionMs` not
 *   positive integers or `leaseMs` > `retentionMs`
 * @example
 * ```ts
 * import { createPhaseRunner, definePhases } from 'retrysafe';
 * import { createSqliteStore } from 'retrysafe/sqlite';
 *
 * const runner = createPhaseRunner({ store: createSqliteStore({ path: './app.db' }), transactional: true });
 * const execution = await runner.execute(rides, { scope: tenant, key, fingerprint: fp }, { rider, cents });
 * ```
 */
export function createPhaseRunner(options: PlainPhaseRunnerOptions): PhaseRunner;
export function createPhaseRunner<Tx>(options: TransactionalPhaseRunnerOptions<Tx>): PhaseRunner<Tx>;
export function createPhaseRunner<Tx>(options: PlainPhaseRunnerOptions | TransactionalPhaseRunnerOptions<Tx>): PhaseRunner<Tx> {
  return new Runner<Tx>(options);
}

/** The name of a store for error messages: its class, or what it is. */
export function storeName(store: unknown): string {
  const name = (store as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  return typeof name === 'string' && name !== '' && name !== 'Object' ? name : describe(store);
}

/** A phase failed terminally: the recovery point its saga starts from. Never leaves the runner. */
class Aborted extends Error {
  constructor(readonly text: string) {
    super('a phase failed terminally');
  }
}

/** A store known to have `checkpoint`. */
type CheckpointingStore = IdempotencyStore & Required<Pick<IdempotencyStore, 'checkpoint'>>;

/** What one run of the lease holder knows; updated as phases commit. */
interface Lease {
  /** The claim, once won (possibly inside a transaction that later rolled back). */
  claim?: Claim;
  /** The recovery point text as last committed, or `undefined` while no phase has committed. */
  committed?: string;
  /** The phase after which the claim found the record, when it resumed one. */
  resumedFrom?: string;
}

type Step = { readonly done: PhasedExecution } | { readonly claim: Claim; readonly committed: string };

class Runner<Tx> implements PhaseRunner<Tx> {
  readonly options: PhaseRunner<Tx>['options'];
  readonly store: CheckpointingStore;

  constructor(options: PlainPhaseRunnerOptions | TransactionalPhaseRunnerOptions<Tx>) {
    requireOptions('createPhaseRunner', options);
    const store = requireIdempotencyStore(options.store);
    if (typeof options.store.checkpoint !== 'function') {
      throw new TypeError(
        `retrysafe: option "store" (${storeName(store)}) has no checkpoint() method, which atomic phases need to record recovery points`,
      );
    }
    this.store = options.store as CheckpointingStore;
    const transactional = options.transactional === true;
    const candidate = options.store as Partial<TransactionalStore<Tx>>;
    if (transactional && (typeof candidate.transaction !== 'function' || typeof candidate.claimTransaction !== 'function')) {
      throw new TypeError(
        `retrysafe: option "transactional" is true but the store (${storeName(store)}) has no transaction() and claimTransaction() methods`,
      );
    }
    const leaseMs = requireDurationMs('leaseMs', options.leaseMs ?? 30_000);
    const retentionMs = requireDurationMs('retentionMs', options.retentionMs ?? 86_400_000);
    requireAtMost('leaseMs', leaseMs, 'retentionMs', retentionMs);
    const maxCompensationAttempts = requireCount('maxCompensationAttempts', options.maxCompensationAttempts ?? 5);
    this.options = Object.freeze({ leaseMs, retentionMs, maxCompensationAttempts, transactional });
  }

  async execute<Input>(plan: PhasePlan<Tx, Input>, id: OperationId, input: Input): Promise<PhasedExecution> {
    checkPlan('plan.', plan);
    // The first execution's phases see the same JSON round trip a resumed one does.
    const stored: unknown = JSON.parse(encodeRecoveryPoint({ plan: plan.id, phase: '', input, state: undefined }));
    const fresh = (stored as { input?: unknown }).input as Input;
    const lease: Lease = {};
    try {
      for (;;) {
        let step: Step;
        try {
          step = await this.step(plan, id, fresh, lease);
        } catch (failure) {
          if (!(failure instanceof Aborted)) throw failure;
          step = await this.abort(id, lease, failure);
        }
        if ('done' in step) return step.done;
        lease.claim = step.claim;
        lease.committed = step.committed;
      }
    } catch (failure) {
      await this.handBack(lease, failure instanceof PhaseFailed ? failure.handBack : undefined, id);
      if (failure instanceof PhaseFailed) throw failure.error;
      if (failure instanceof IdempotencyError) throw failure;
      throw new StoreUnavailableError(failure);
    }
  }

  /**
   * Runs the next phase: in its own transaction, or alone followed by a fenced checkpoint. The first step
   * claims the key first, on the store (in transactional mode, through `claimTransaction`, so the claim
   * lands where the store's claim always does).
   */
  private async step<Input>(plan: PhasePlan<Tx, Input>, id: OperationId, input: Input, lease: Lease): Promise<Step> {
    const held = lease.claim;
    if (!this.options.transactional) {
      if (held !== undefined) return this.runPhase(this.store, undefined as Tx, held, plan, id, input, lease);
      const result = await this.store.claim(claimInputOf(id, this.options));
      if (!result.acquired) return this.lost(id, result.record);
      return this.runPhase(this.store, undefined as Tx, this.hold(result.claim, plan, id, lease), plan, id, input, lease);
    }
    const store = this.store as TransactionalStore<Tx> & CheckpointingStore;
    if (held !== undefined) return store.transaction((tx, view) => this.runPhase(view, tx, held, plan, id, input, lease));
    const outcome = await store.claimTransaction(claimInputOf(id, this.options), (tx, view, claim) =>
      this.runPhase(view, tx, this.hold(claim, plan, id, lease), plan, id, input, lease),
    );
    return outcome.acquired ? outcome.value : this.lost(id, outcome.record);
  }

  /** Records a won claim in `lease`, and the recovery point it resumes from, if any. */
  private hold<Input>(claim: Claim, plan: PhasePlan<Tx, Input>, id: OperationId, lease: Lease): Claim {
    lease.claim = claim;
    if (claim.recoveryPoint !== undefined) {
      lease.committed = claim.recoveryPoint;
      lease.resumedFrom = this.locate(plan, id, claim.recoveryPoint).point.phase;
    }
    return claim;
  }

  private async runPhase<Input>(
    store: TransactionView,
    tx: Tx,
    claim: Claim,
    plan: PhasePlan<Tx, Input>,
    id: OperationId,
    input: Input,
    lease: Lease,
  ): Promise<Step> {
    const { point, index } = lease.committed === undefined ? { point: undefined, index: 0 } : this.locate(plan, id, lease.committed);
    if (point?.saga !== undefined) {
      const step = await sagaStep(store, tx, claim, plan, id, { ...point, saga: point.saga }, this.options);
      if ('claim' in step) return step;
      const { resumedFrom } = lease;
      return { done: { response: step.response, replayed: false, outcome: 'compensated', ...(resumedFrom !== undefined && { resumedFrom }) } };
    }
    const phase = plan.phases[index] as Phase<Tx, Input>;
    const phaseInput = point === undefined ? input : (point.input as Input);
    const context: PhaseContext<Tx, Input> = {
      input: phaseInput,
      state: point?.state,
      tx,
      claim,
      phase: phase.name,
      resumed: lease.resumedFrom !== undefined,
      derivedKey: (step: string) => derivedKey(id, step),
    };
    let value: unknown;
    try {
      value = await phase.run(context);
    } catch (error) {
      if (!(error instanceof TerminalPhaseError)) throw new PhaseFailed(error);
      let saga: string;
      try {
        saga = beginSaga(plan, point, phaseInput, phase.name, error);
      } catch (encoding) {
        throw new PhaseFailed(encoding);
      }
      throw new Aborted(saga);
    }
    if (index === plan.phases.length - 1) {
      let response: StoredResponse;
      try {
        response = plan.respond(value);
      } catch (error) {
        throw new PhaseFailed(error);
      }
      if (!(await store.complete(claim, response, this.options.retentionMs))) {
        throw new LeaseLostError(id.scope, id.key);
      }
      const { resumedFrom } = lease;
      return { done: { response, replayed: false, outcome: 'completed', ...(resumedFrom !== undefined && { resumedFrom }) } };
    }
    let committed: string;
    try {
      committed = encodeRecoveryPoint({ plan: plan.id, phase: phase.name, input: phaseInput, state: value });
    } catch (error) {
      throw new PhaseFailed(error);
    }
    const renewed = await store.checkpoint(claim, committed, this.options.leaseMs);
    if (renewed === undefined) throw new LeaseLostError(id.scope, id.key);
    return { claim: renewed, committed };
  }

  /**
   * Decodes the record's recovery point for `plan` and finds the phase to run next, refusing a point this
   * plan cannot resume: another plan's, or a phase the plan no longer has before its last one.
   */
  private locate<Input>(plan: PhasePlan<Tx, Input>, id: OperationId, text: string): { point: RecoveryPoint; index: number } {
    const point = decodeRecoveryPoint(text);
    // A saga on its way back is located by its pending compensations (checked by its step), not its phase.
    if (point?.saga !== undefined && point.plan === plan.id) return { point, index: -1 };
    const index = point?.plan === plan.id ? plan.phases.findIndex((phase) => phase.name === point.phase) + 1 : 0;
    if (point === undefined || index === 0 || index >= plan.phases.length) {
      throw new PhaseFailed(
        new RecoveryPointUnresumableError(
          id.scope,
          id.key,
          plan.id,
          `retrysafe: record ${JSON.stringify([id.scope, id.key])} is at recovery point ${describe(point?.phase ?? text)} of plan ` +
            `${describe(point?.plan)}, which plan ${describe(plan.id)} cannot resume`,
        ),
      );
    }
    return { point, index };
  }

  /** A claim lost to `record`: the replay, or a typed error. */
  private lost(id: OperationId, record: IdempotencyRecord): Step {
    const response = answerStanding(record, id);
    if (response === undefined) throw new RequestInProgressError(record);
    return { done: { response, replayed: true, outcome: sagaStatusOf(record) === 'compensated' ? 'compensated' : 'completed' } };
  }

  /**
   * Turns the operation back after a terminal failure: records the saga's first recovery point under the
   * claim. In transactional mode a claim or takeover made in the failed phase's transaction may have rolled
   * back with it (SQLite), so the key is then claimed again: the saga is recorded if the record still stands
   * where this run found it; a record someone else advanced meanwhile is resumed where it stands.
   */
  private async abort(id: OperationId, lease: Lease, aborted: Aborted): Promise<Step> {
    const held = lease.claim === undefined ? undefined : await this.store.checkpoint(lease.claim, aborted.text, this.options.leaseMs);
    if (held !== undefined) return { claim: held, committed: aborted.text };
    if (!this.options.transactional) throw new LeaseLostError(id.scope, id.key);
    const result = await this.store.claim(claimInputOf(id, this.options));
    if (!result.acquired) return this.lost(id, result.record);
    lease.claim = result.claim;
    const found = result.claim.recoveryPoint;
    if (found !== lease.committed) {
      if (found !== undefined) return { claim: result.claim, committed: found };
      await this.store.release(result.claim);
      throw new LeaseLostError(id.scope, id.key);
    }
    const renewed = await this.store.checkpoint(result.claim, aborted.text, this.options.leaseMs);
    if (renewed === undefined) throw new LeaseLostError(id.scope, id.key);
    return { claim: renewed, committed: aborted.text };
  }

  /**
   * After a failure: records the failed step's own hand-back when it has one (a compensation's failed
   * attempt, or a saga's pause), else releases a record no phase committed (a retry starts afresh), or ends the lease on one
   * at a recovery point so the next claim resumes it. Fenced, so a claim that rolled back with its
   * transaction, or was taken over, changes nothing. Best effort: the failure being reported matters more.
   */
  private async handBack(lease: Lease, override: HandBack | undefined, id: OperationId): Promise<void> {
    const { claim, committed } = lease;
    if (claim === undefined) return;
    if (override === undefined) {
      if (committed === undefined) await this.store.release(claim).catch(() => false);
      else await this.store.checkpoint(claim, committed, 0).catch(() => undefined);
      return;
    }
    await this.recordHandBack(claim, committed, override, id).catch(() => undefined);
  }

  /**
   * Records a failed step's own hand-back. In transactional mode a takeover made in that step's transaction
   * rolled back with it (the record is as the takeover found it, its lease over), so the key is claimed
   * again — and the hand-back recorded only if the record still stands at the recovery point this run saw.
   */
  private async recordHandBack(claim: Claim, committed: string | undefined, override: HandBack, id: OperationId): Promise<void> {
    if ((await this.store.checkpoint(claim, override.text, override.leaseMs)) !== undefined || !this.options.transactional) return;
    const again = await this.store.claim(claimInputOf(id, this.options));
    if (!again.acquired) return;
    if (again.claim.recoveryPoint === committed) await this.store.checkpoint(again.claim, override.text, override.leaseMs);
    else await this.store.checkpoint(again.claim, again.claim.recoveryPoint ?? '', 0);
  }
}
