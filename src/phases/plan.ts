/**
 * Plans of atomic phases: an operation split into named phases, each committed on its own and ending in a
 * recovery point (after Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres"). A plan is
 * plain data plus functions, independent of any store; a {@link PhaseRunner} (see `phase-runner.ts`) runs
 * it, and the completer re-drives abandoned runs of it.
 *
 * @module
 */
import { describe, invalidOption, requireFunction, requireNonEmptyString } from '../core/validate.js';
import type { Claim, StoredResponse } from '../core/record.js';

/** What a phase is handed. */
export interface PhaseContext<Tx, Input> {
  /**
   * The operation's input, JSON round-tripped: the value the first execution was given, also on a resume
   * by a retry, a takeover or the completer (it is stored with each recovery point).
   */
  readonly input: Input;
  /**
   * What the previous phase returned (JSON round-tripped), or `undefined` in the first phase. It is saved
   * with the previous phase's recovery point, so a resumed run sees exactly what the crashed one handed on.
   */
  readonly state: unknown;
  /** In transactional mode, the transaction this phase's writes commit in, with its checkpoint; else `undefined`. */
  readonly tx: Tx;
  /** The lease this execution holds. */
  readonly claim: Claim;
  /** This phase's name. */
  readonly phase: string;
  /** `true` when this execution resumed from a recovery point another execution (or attempt) committed. */
  readonly resumed: boolean;
  /**
   * The idempotency key to send with a foreign call made in this phase: stable per (scope, key,
   * fingerprint, step), so a phase re-run after a crash repeats the call under the same key. See `derivedKey`.
   */
  readonly derivedKey: (step: string) => string;
}

/** What a phase's `compensate` is handed. */
export interface CompensationContext<Tx, Input> {
  /** The operation's input, as the forward phases saw it. */
  readonly input: Input;
  /**
   * The state the last committed phase handed on (JSON round-tripped): what the failed phase was given.
   * Let each phase carry forward what a compensation needs (a reservation id, a charge id).
   */
  readonly state: unknown;
  /** In transactional mode, the transaction this compensation's writes commit in, with its checkpoint. */
  readonly tx: Tx;
  readonly claim: Claim;
  /** The name of the phase being compensated. */
  readonly phase: string;
  /** The terminal failure that started the saga's way back. */
  readonly failure: SagaFailure;
  /** Failed attempts of this compensation before this one (0 on the first). */
  readonly attempt: number;
  /**
   * The idempotency key to send with this compensation's foreign call: `derivedKey(id, 'compensate:' + step)`,
   * `step` being the phase's name unless given, so a compensation re-run after a crash refunds once.
   */
  readonly derivedKey: (step?: string) => string;
}

/** The terminal failure of a saga, as saved with its recovery point. */
export interface SagaFailure {
  /** The phase that threw `TerminalPhaseError`. */
  readonly phase: string;
  /** The error's message. */
  readonly reason: string;
  /** The error's JSON `details`, if any. */
  readonly details?: unknown;
}

/** One phase of a plan. */
export interface Phase<Tx, Input> {
  /** The recovery point this phase reaches when it commits; unique within its plan. */
  readonly name: string;
  /**
   * The phase's work. Intermediate phases return the state for the next phase (a small JSON value, or
   * `undefined`); the last phase returns the value the plan's `respond` turns into the saved response.
   * Throwing leaves the record at the previous recovery point; the next attempt re-runs this phase. A
   * business failure that must not be retried (a declined card) is a value the last phase returns, not a throw.
   */
  run(context: PhaseContext<Tx, Input>): Promise<unknown>;
  /**
   * Undoes this phase's effect after a later phase failed terminally (threw `TerminalPhaseError`): a
   * refund for a charge, a release for a reservation. Runs as a phase of its own — its own transaction
   * and recovery point — at most once to completion; throwing retries it (up to the runner's
   * `maxCompensationAttempts`), throwing `TerminalPhaseError` gives up at once. Phases without one are
   * skipped on the way back.
   */
  compensate?(context: CompensationContext<Tx, Input>): Promise<unknown>;
}

/** A validated, frozen plan; create one with {@link definePhases}. */
export interface PhasePlan<Tx = undefined, Input = unknown> {
  /** Stable id, stored with every recovery point, by which the completer finds the plan of a record. */
  readonly id: string;
  readonly phases: readonly Phase<Tx, Input>[];
  /** Turns the last phase's value into the response saved for replay. */
  readonly respond: (value: unknown) => StoredResponse;
  /** Builds the response saved for replay once a saga is compensated. */
  readonly compensated: (failure: SagaFailure) => StoredResponse;
}

/** What {@link definePhases} takes. */
export interface PhasePlanInput<Tx, Input> {
  /** Stable id (1–200 characters). Renaming it strands records already in flight under the old id. */
  readonly id: string;
  /** At least one phase; names unique and non-empty. */
  readonly phases: readonly Phase<Tx, Input>[];
  /**
   * Builds the saved response from the last phase's value.
   * @defaultValue status 200, `content-type: application/json`, the value as JSON (empty body for `undefined`)
   */
  readonly respond?: (value: unknown) => StoredResponse;
  /**
   * Builds the saved response of a compensated saga from its terminal failure.
   * @defaultValue status 409, an RFC 9457 `application/problem+json` body with code `saga-compensated`,
   *   the failure's message as `detail` and its details as `details`
   */
  readonly compensated?: (failure: SagaFailure) => StoredResponse;
}

const encoder = new TextEncoder();
const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' });
const PROBLEM_HEADERS = Object.freeze({ 'content-type': 'application/problem+json' });

function compensatedProblem(failure: SagaFailure): StoredResponse {
  const problem = {
    type: 'https://retrysafe.dev/problems/saga-compensated',
    title: 'The operation failed and was compensated',
    status: 409,
    detail: failure.reason,
    code: 'saga-compensated',
    message: failure.reason,
    ...(failure.details !== undefined && { details: failure.details }),
  };
  return { status: 409, headers: PROBLEM_HEADERS, body: encoder.encode(JSON.stringify(problem)) };
}

function jsonResponse(value: unknown): StoredResponse {
  const text = JSON.stringify(value) as string | undefined;
  return { status: 200, headers: JSON_HEADERS, body: text === undefined ? new Uint8Array() : encoder.encode(text) };
}

/**
 * Defines a plan of atomic phases.
 *
 * @typeParam Tx - the transaction handle of the runner's store in transactional mode (e.g. a
 *   `better-sqlite3` `Database`); `undefined` for a plain store
 * @typeParam Input - the operation's input; must survive a JSON round trip
 * @throws TypeError naming the option when `id` is empty or longer than 200 characters, `phases` is empty,
 *   a phase has no name or no `run` function, two phases share a name, or `respond` is not a function
 * @example
 * ```ts
 * const rides = definePhases<Database, { rider: string; cents: number }>({
 *   id: 'ride.create',
 *   phases: [
 *     { name: 'ride-created', run: async ({ tx, input }) => ({ rideId: insertRide(tx, input) }) },
 *     { name: 'charged', run: async ({ input, state, derivedKey }) =>
 *         ({ ...(state as object), chargeId: await cards.charge(input.cents, derivedKey('charge')) }) },
 *     { name: 'receipt-sent', run: async ({ state }) => state },
 *   ],
 * });
 * ```
 */
export function definePhases<Tx = undefined, Input = unknown>(plan: PhasePlanInput<Tx, Input>): PhasePlan<Tx, Input> {
  if (typeof plan !== 'object' || plan === null) {
    throw new TypeError(`retrysafe: definePhases expects a plan object, got ${describe(plan)}`);
  }
  const resolved = { id: plan.id, phases: plan.phases, respond: plan.respond ?? jsonResponse, compensated: plan.compensated ?? compensatedProblem };
  checkPlan('', resolved);
  return Object.freeze({
    id: resolved.id,
    phases: Object.freeze(
      resolved.phases.map((phase) =>
        Object.freeze({
          name: phase.name,
          run: phase.run.bind(phase),
          ...(phase.compensate !== undefined && { compensate: phase.compensate.bind(phase) }),
        }),
      ),
    ),
    respond: resolved.respond,
    compensated: resolved.compensated,
  });
}

/**
 * Checks that `plan` has the shape {@link definePhases} returns: the runner and the completer check the
 * plans they are given (a plans module loaded by the CLI may build its plans with another copy of this code).
 *
 * @param option - where the plan came from, for the error message (e.g. `plans[2].`), or `''`
 * @throws TypeError naming the option, as {@link definePhases} does
 */
export function checkPlan<Tx, Input>(option: string, plan: unknown): asserts plan is PhasePlan<Tx, Input> {
  if (typeof plan !== 'object' || plan === null) throw invalidOption(option || 'plan', 'a plan from definePhases', plan);
  const { id, phases, respond, compensated } = plan as Partial<PhasePlan<Tx, Input>>;
  if (typeof id !== 'string' || id.length === 0 || id.length > 200) throw invalidOption(`${option}id`, 'a string of 1 to 200 characters', id);
  if (!Array.isArray(phases) || phases.length === 0) throw invalidOption(`${option}phases`, 'a non-empty array of phases', phases);
  const names = new Set<string>();
  for (const [index, phase] of (phases as unknown[]).entries()) {
    const candidate = phase as Partial<Phase<Tx, Input>> | null;
    if (typeof candidate !== 'object' || candidate === null) throw invalidOption(`${option}phases[${index}].name`, 'a non-empty string', undefined);
    const name = requireNonEmptyString(`${option}phases[${index}].name`, candidate.name);
    requireFunction(`${option}phases[${index}].run`, candidate.run);
    if (candidate.compensate !== undefined) requireFunction(`${option}phases[${index}].compensate`, candidate.compensate);
    if (names.has(name)) throw new TypeError(`retrysafe: option "${option}phases[${index}].name" repeats the phase name ${describe(name)}`);
    names.add(name);
  }
  requireFunction(`${option}respond`, respond);
  requireFunction(`${option}compensated`, compensated);
}
