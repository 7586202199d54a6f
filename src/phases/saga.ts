/**
 * Sagas on atomic phases: when a phase fails terminally (throws `TerminalPhaseError`), the runner walks the
 * committed phases back, newest first, running each one's `compensate` as a phase of its own — its own
 * transaction, its own recovery point, its own derived key (`compensate:<phase>`) — and then saves the
 * plan's compensated response. The saga's progress lives in the recovery point (`saga`), so a crash during
 * compensation resumes it (by a retry, a takeover or the completer) and each compensation's foreign effect
 * happens once.
 *
 * Source: Garcia-Molina and Salem, "Sagas" (SIGMOD 1987); Brandur Leach, "Implementing Stripe-like
 * Idempotency Keys in Postgres" (recovery points, derived keys). See docs/phases.md.
 *
 * @module
 */
import { derivedKey } from './derived-key.js';
import { CompensationFailedError, LeaseLostError, RecoveryPointUnresumableError, TerminalPhaseError } from '../core/errors.js';
import { PhaseFailed } from './phase-failed.js';
import type { CompensationContext, PhasePlan, SagaFailure } from './plan.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../core/record.js';
import type { OperationId } from '../core/receiver.js';
import { decodeRecoveryPoint, encodeRecoveryPoint, type RecoveryPoint, type SagaProgress } from './recovery-point.js';
import type { TransactionView } from '../core/store.js';

/** What a reader calls a record's state: the store's, or the saga status of its recovery point when it has one. */
export type SagaStatus = SagaProgress['status'];

/**
 * The saga status of `record`: `compensating`, `compensation_failed` or `compensated` (the last also once
 * the record completed with its compensated response), or `undefined` for a record that is not on a saga's
 * way back.
 */
export function sagaStatusOf(record: Pick<IdempotencyRecord, 'recoveryPoint'>): SagaStatus | undefined {
  return record.recoveryPoint === undefined ? undefined : decodeRecoveryPoint(record.recoveryPoint)?.saga?.status;
}

/** The recovery point a saga starts from when phase `failed` threw `error` at `point` (or before any). */
export function beginSaga<Tx, Input>(
  plan: PhasePlan<Tx, Input>,
  point: RecoveryPoint | undefined,
  input: unknown,
  failed: string,
  error: TerminalPhaseError,
): string {
  const committed = point === undefined ? -1 : plan.phases.findIndex((phase) => phase.name === point.phase);
  const pending = plan.phases
    .slice(0, committed + 1)
    .filter((phase) => phase.compensate !== undefined)
    .map((phase) => phase.name)
    .reverse();
  const saga: SagaProgress = {
    status: 'compensating',
    failed,
    reason: error.message,
    ...(error.details !== undefined && { details: error.details }),
    pending,
    attempts: 0,
  };
  return encodeRecoveryPoint({ plan: plan.id, phase: point?.phase ?? '', input, state: point?.state, saga });
}

/** The failure a saga's compensations and compensated response are handed. */
function failureOf(saga: SagaProgress): SagaFailure {
  return { phase: saga.failed, reason: saga.reason, ...(saga.details !== undefined && { details: saga.details }) };
}

/** The runner's settings a compensation step needs. Milliseconds. */
interface SagaSettings {
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly maxCompensationAttempts: number;
}

/** What one compensation step ended in: the compensated response saved, or the next recovery point. */
type SagaStep = { readonly response: StoredResponse } | { readonly claim: Claim; readonly committed: string };

/**
 * Runs the saga's next step at `point` under `claim`: the next pending compensation and its checkpoint, or,
 * with none left, the compensated response. The last compensation, its `compensated` checkpoint and the
 * response commit together (one transaction in transactional mode).
 *
 * @throws PhaseFailed wrapping the compensation's error, with the hand-back that records the failed
 *   attempt (lease 0), or wrapping {@link CompensationFailedError} with the pause (a lease of the
 *   retention) when it gave up
 * @throws LeaseLostError when a checkpoint or the completion was fenced off
 */
export async function sagaStep<Tx, Input>(
  store: TransactionView,
  tx: Tx,
  claim: Claim,
  plan: PhasePlan<Tx, Input>,
  id: OperationId,
  point: RecoveryPoint & { readonly saga: SagaProgress },
  settings: SagaSettings,
): Promise<SagaStep> {
  const { saga } = point;
  const next = saga.pending[0];
  if (saga.status === 'compensation_failed') {
    // Claimed once its pause ran out: still the operator's.
    throw new PhaseFailed(new CompensationFailedError(id.scope, id.key, next ?? saga.failed, new Error(saga.lastError ?? saga.reason)), {
      text: encodeRecoveryPoint(point),
      leaseMs: settings.retentionMs,
    });
  }
  if (saga.status === 'compensated' || next === undefined) return finish(store, claim, plan, id, point, saga.status === 'compensated', settings);
  const phase = plan.phases.find((candidate) => candidate.name === next);
  if (phase?.compensate === undefined) {
    throw new PhaseFailed(
      new RecoveryPointUnresumableError(
        id.scope,
        id.key,
        plan.id,
        `retrysafe: record ${JSON.stringify([id.scope, id.key])} waits for the compensation of phase ${JSON.stringify(next)}, which plan ${JSON.stringify(plan.id)} does not have`,
      ),
    );
  }
  const context: CompensationContext<Tx, Input> = {
    input: point.input as Input,
    state: point.state,
    tx,
    claim,
    phase: next,
    failure: failureOf(saga),
    attempt: saga.attempts,
    derivedKey: (step = next) => derivedKey(id, `compensate:${step}`),
  };
  try {
    await phase.compensate(context);
  } catch (error) {
    const attempts = saga.attempts + 1;
    const giveUp = error instanceof TerminalPhaseError || attempts >= settings.maxCompensationAttempts;
    const lastError = error instanceof Error ? error.message : String(error);
    const text = encodeRecoveryPoint({ ...point, saga: { ...saga, status: giveUp ? 'compensation_failed' : 'compensating', attempts, lastError } });
    throw new PhaseFailed(giveUp ? new CompensationFailedError(id.scope, id.key, next, error) : error, {
      text,
      leaseMs: giveUp ? settings.retentionMs : 0,
    });
  }
  const after = { ...point, saga: withoutLastError({ ...saga, pending: saga.pending.slice(1), attempts: 0 }) };
  if (after.saga.pending.length === 0) return finish(store, claim, plan, id, after, false, settings);
  const committed = encodeRecoveryPoint(after);
  const renewed = await store.checkpoint(claim, committed, settings.leaseMs);
  if (renewed === undefined) throw new LeaseLostError(id.scope, id.key);
  return { claim: renewed, committed };
}

/** `saga` without the last attempt's error, once the compensation it belonged to succeeded. */
function withoutLastError(saga: SagaProgress): SagaProgress {
  const next: { -readonly [K in keyof SagaProgress]?: SagaProgress[K] } = { ...saga };
  delete next.lastError;
  return next as SagaProgress;
}

/** Records the saga `compensated` (unless it already is) and saves the plan's compensated response. */
async function finish<Tx, Input>(
  store: TransactionView,
  claim: Claim,
  plan: PhasePlan<Tx, Input>,
  id: OperationId,
  point: RecoveryPoint & { readonly saga: SagaProgress },
  recorded: boolean,
  settings: SagaSettings,
): Promise<SagaStep> {
  let response: StoredResponse;
  try {
    response = plan.compensated(failureOf(point.saga));
  } catch (error) {
    throw new PhaseFailed(error);
  }
  if (!recorded) {
    const text = encodeRecoveryPoint({ ...point, saga: { ...point.saga, status: 'compensated' } });
    if ((await store.checkpoint(claim, text, settings.leaseMs)) === undefined) throw new LeaseLostError(id.scope, id.key);
  }
  if (!(await store.complete(claim, response, settings.retentionMs))) throw new LeaseLostError(id.scope, id.key);
  return { response };
}
