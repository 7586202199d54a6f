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
}

/** Format version, so a later format can be told apart and refused instead of misread. */
const VERSION = 1;

/**
 * Encodes a recovery point as JSON text: `{"v":1,"plan":…,"phase":…,"input":…,"state":…}`.
 *
 * @throws TypeError when `input` or `state` cannot be represented as JSON (a BigInt, a cycle)
 */
export function encodeRecoveryPoint(point: RecoveryPoint): string {
  try {
    return JSON.stringify({ v: VERSION, plan: point.plan, phase: point.phase, input: point.input, state: point.state });
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
  return { plan: fields['plan'], phase: fields['phase'], input: fields['input'], state: fields['state'] };
}
