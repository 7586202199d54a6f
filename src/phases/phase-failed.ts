/**
 * The runner's wrapper of a phase's (or a compensation's) own failure, told apart from a store failure;
 * it never leaves the runner, which rethrows the wrapped error after handing the record back.
 *
 * @module
 */

/** How the record is handed back after the failure, when not at the last committed recovery point with a zero lease. */
export interface HandBack {
  /** The recovery point text to record. */
  readonly text: string;
  /** The lease left on the record, in milliseconds (0: the next claim takes it over at once). */
  readonly leaseMs: number;
}

/** A phase's own failure, and how to hand the record back. */
export class PhaseFailed extends Error {
  constructor(
    readonly error: unknown,
    readonly handBack?: HandBack,
  ) {
    super('a phase failed', { cause: error });
  }
}
