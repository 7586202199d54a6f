/**
 * The text a multi-phase operation stores as its record's recovery point. The store contract keeps one
 * string per record (`IdempotencyRecord.recoveryPoint`); the phase runner puts a small JSON document in
 * it, so that a retry, a takeover after a crash, or the completer can resume without the client: which
 * plan, which phase committed last, the operation's input, and the state that phase handed on.
 *
 * @module
 */

/** A decoded recovery point. `input` and `state` are JSON values (already round-tripped). */
export interface RecoveryPoint {
  /** The id of the plan (`definePhases({ id })`) the record runs. */
  readonly plan: string;
  /** The name of the last phase whose work and checkpoint committed. */
  readonly phase: string;
  /** The operation's input, as given to the first execution. */
  readonly input: unknown;
  /** What the last committed phase returned, handed to the next phase as `context.state`. */
  readonly state: unknown;
  /** Present once a phase failed terminally: the saga's way back. Absent on a forward run. */
  readonly saga?: SagaProgress;
}

/**
 * Where a saga's compensation stands. Its `status` is the state a reader sees (`retrysafe inspect`):
 * `compensating` while compensations remain, `compensated` once all ran (the record then completes with
 * the plan's compensated response), `compensation_failed` when one gave up and the saga waits for an operator.
 */
export interface SagaProgress {
  readonly status: 'compensating' | 'compensated' | 'compensation_failed';
  /** The phase that failed terminally. */
  readonly failed: string;
  /** The terminal failure's message. */
  readonly reason: string;
  /** The failure's JSON details (`TerminalPhaseError.details`), if it had any. */
  readonly details?: unknown;
  /** Names of the committed phases whose compensation has not run yet, the next one first. */
  readonly pending: readonly string[];
  /** Failed attempts of the next compensation so far. */
  readonly attempts: number;
  /** The last compensation error's message, when an attempt failed. */
  readonly lastError?: string;
  /** Compensations an operator marked as done by hand (`retrysafe compensation --mark-compensated`) instead of running them. */
  readonly settled?: readonly string[];
}

const SAGA_STATUSES: readonly unknown[] = ['compensating', 'compensated', 'compensation_failed'];

/** Format version, so a later format can be told apart and refused instead of misread. */
const VERSION = 1;

/**
 * Encodes a recovery point as JSON text: `{"v":1,"plan":…,"phase":…,"input":…,"state":…}`, plus
 * `"saga":{…}` once the operation is compensating.
 *
 * @throws TypeError when `input` or `state` cannot be represented as JSON (a BigInt, a cycle)
 */
export function encodeRecoveryPoint(point: RecoveryPoint): string {
  try {
    const fields = { v: VERSION, plan: point.plan, phase: point.phase, input: point.input, state: point.state };
    return JSON.stringify(point.saga === undefined ? fields : { ...fields, saga: point.saga });
  } catch (error) {
    throw new TypeError(`retrysafe: a phase's input and state must be JSON-serialisable (${String(error)})`, { cause: error });
  }
}

/**
 * Decodes a recovery point written by {@link encodeRecoveryPoint}.
 *
 * @returns the recovery point, or `undefined` when `text` is not one (another format, or a plain name
 *   written by other code)
 */
export function decodeRecoveryPoint(text: string): RecoveryPoint | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const fields = parsed as Record<string, unknown>;
  if (fields['v'] !== VERSION || typeof fields['plan'] !== 'string' || typeof fields['phase'] !== 'string') return undefined;
  const point = { plan: fields['plan'], phase: fields['phase'], input: fields['input'], state: fields['state'] };
  if (fields['saga'] === undefined) return point;
  const saga = sagaOf(fields['saga']);
  return saga === undefined ? undefined : { ...point, saga };
}

function sagaOf(value: unknown): SagaProgress | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const saga = value as Partial<Record<keyof SagaProgress, unknown>>;
  const { status, failed, reason, pending, attempts } = saga;
  if (!SAGA_STATUSES.includes(status) || typeof failed !== 'string' || typeof reason !== 'string') return undefined;
  if (!Array.isArray(pending) || !pending.every((name) => typeof name === 'string')) return undefined;
  if (typeof attempts !== 'number' || !Number.isInteger(attempts) || attempts < 0) return undefined;
  return {
    status: status as SagaProgress['status'],
    failed,
    reason,
    ...(saga.details !== undefined && { details: saga.details }),
    pending: pending,
    attempts,
    ...(typeof saga.lastError === 'string' && { lastError: saga.lastError }),
    ...(Array.isArray(saga.settled) && { settled: saga.settled.filter((name): name is string => typeof name === 'string') }),
  };
}
