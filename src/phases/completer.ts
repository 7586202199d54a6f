/**
 * The completer: finishes multi-phase operations whose client went away. A record left `in_progress` at
 * a recovery point with an expired lease (its holder crashed, or a phase failed and nobody retried) is
 * taken over and driven through the rest of its plan, from the input and state stored with its recovery
 * point — so, for example, a ride whose card was charged still gets its receipt and its saved response.
 * A saga left on its way back (compensating) is driven the same way, through its remaining compensations
 * to its compensated response.
 *
 * Source: Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres" (the completer).
 *
 * @module
 */
import { CompensationFailedError, RequestInProgressError } from '../core/errors.js';
import { checkPlan, type PhasePlan } from './plan.js';
import { storeName, type PhaseRunner } from './runner.js';
import { decodeRecoveryPoint } from './recovery-point.js';
import type { SagaStatus } from './saga.js';
import { describe, invalidOption, requireCount, requireOptions } from '../core/validate.js';

/** Options of {@link completeAbandoned}. */
export interface CompleteAbandonedOptions<Tx> {
  /** Runs the plans; its store is searched with `listAbandoned`. */
  readonly runner: PhaseRunner<Tx>;
  /** The plans the completer may re-drive, found by the plan id stored with each recovery point. Ids unique. */
  readonly plans: readonly PhasePlan<Tx, never>[];
  /** Most records handled in this call. @defaultValue 100 */
  readonly limit?: number;
}

/** A record the completer looked at. */
export interface AbandonedRecordRef {
  readonly scope: string;
  readonly key: string;
  /** The plan id stored with the recovery point, when it could be read. */
  readonly plan?: string;
  /** The phase the record had reached, when it could be read. */
  readonly phase?: string;
  /** The saga status the record was found in, when a phase had failed terminally (`compensating`, `compensated`). */
  readonly saga?: SagaStatus;
}

/** What one {@link completeAbandoned} call did. */
export interface CompletionReport {
  /** Abandoned records found (at most `limit`). */
  readonly found: number;
  /** Records driven to completion; their responses are saved for replay. */
  readonly completed: readonly AbandonedRecordRef[];
  /** Records whose saga was driven through its compensations; their compensated responses are saved for replay. */
  readonly compensated: readonly AbandonedRecordRef[];
  /** Sagas whose compensation gave up during the re-drive: now `compensation_failed`, waiting for an operator. */
  readonly paused: readonly (AbandonedRecordRef & { readonly error: CompensationFailedError })[];
  /**
   * Records left alone: `unknown-plan` (no plan with the stored id, or an unreadable recovery point),
   * `taken` (a retry or another completer holds it now), `already-completed`.
   */
  readonly skipped: readonly (AbandonedRecordRef & { readonly reason: 'unknown-plan' | 'taken' | 'already-completed' })[];
  /** Records whose re-drive failed (a phase threw, the store failed); each stays resumable. */
  readonly failed: readonly (AbandonedRecordRef & { readonly error: unknown })[];
}

/**
 * Lists up to `limit` abandoned multi-phase records of the runner's store and re-drives each, one after
 * another, through its plan from its recovery point. Each record is claimed first (a takeover), so a
 * record a retrying client or another completer holds is skipped, never run twice.
 *
 * @throws TypeError naming the option when `runner` is not a phase runner, its store has no
 *   `listAbandoned` (the error names the store), a plan is invalid, two plans share an id, or `limit` is
 *   not a positive integer
 * @throws the store's error when listing fails; a failure while re-driving one record is reported in
 *   `failed` instead
 * @example
 * ```ts
 * const report = await completeAbandoned({ runner, plans: [rides], limit: 500 });
 * console.log(`${report.completed.length} finished, ${report.failed.length} failed`);
 * ```
 */
export async function completeAbandoned<Tx>(options: CompleteAbandonedOptions<Tx>): Promise<CompletionReport> {
  requireOptions('completeAbandoned', options);
  const { runner } = options;
  if (typeof runner !== 'object' || runner === null || typeof runner.execute !== 'function') {
    throw invalidOption('runner', 'a phase runner from createPhaseRunner', runner);
  }
  const store = runner.store;
  if (typeof store.listAbandoned !== 'function') {
    throw new TypeError(
      `retrysafe: option "runner" has a store (${storeName(runner.store)}) without listAbandoned(), so abandoned records cannot be found`,
    );
  }
  if (!Array.isArray(options.plans)) throw invalidOption('plans', 'an array of plans', options.plans);
  const plans = new Map<string, PhasePlan<Tx, never>>();
  for (const [index, plan] of options.plans.entries()) {
    checkPlan(`plans[${index}].`, plan);
    if (plans.has(plan.id)) throw new TypeError(`retrysafe: option "plans[${index}].id" repeats the plan id ${describe(plan.id)}`);
    plans.set(plan.id, plan);
  }
  const limit = requireCount('limit', options.limit ?? 100);

  const records = await store.listAbandoned(limit);
  const completed: AbandonedRecordRef[] = [];
  const compensated: AbandonedRecordRef[] = [];
  const paused: (AbandonedRecordRef & { error: CompensationFailedError })[] = [];
  const skipped: (AbandonedRecordRef & { reason: 'unknown-plan' | 'taken' | 'already-completed' })[] = [];
  const failed: (AbandonedRecordRef & { error: unknown })[] = [];
  for (const record of records) {
    const point = record.recoveryPoint === undefined ? undefined : decodeRecoveryPoint(record.recoveryPoint);
    const ref: AbandonedRecordRef = {
      scope: record.scope,
      key: record.key,
      ...(point !== undefined && { plan: point.plan, phase: point.phase }),
      ...(point?.saga !== undefined && { saga: point.saga.status }),
    };
    const plan = point === undefined ? undefined : plans.get(point.plan);
    if (point === undefined || plan === undefined) {
      skipped.push({ ...ref, reason: 'unknown-plan' });
      continue;
    }
    try {
      const id = { scope: record.scope, key: record.key, fingerprint: record.fingerprint };
      const execution = await runner.execute(plan, id, point.input as never);
      if (execution.replayed) skipped.push({ ...ref, reason: 'already-completed' });
      else if (execution.outcome === 'compensated') compensated.push(ref);
      else completed.push(ref);
    } catch (error) {
      if (error instanceof RequestInProgressError) skipped.push({ ...ref, reason: 'taken' });
      else if (error instanceof CompensationFailedError) paused.push({ ...ref, error });
      else failed.push({ ...ref, error });
    }
  }
  return { found: records.length, completed, compensated, paused, skipped, failed };
}
