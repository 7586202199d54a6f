/**
 * The error a demo run rejects with when it was interrupted (Ctrl-C), after removing what it created.
 *
 * @module
 */

/** The run was aborted through its `signal`; {@link DemoInterruptedError.removed} lists what it cleaned up. */
export class DemoInterruptedError extends Error {
  override readonly name = 'DemoInterruptedError';

  constructor(
    /** What the run created and removed before rejecting, e.g. `schema retrysafe_demo_1a2b3c4d`. */
    readonly removed: readonly string[],
  ) {
    super(`interrupted; removed ${removed.length === 0 ? 'nothing (nothing was created yet)' : removed.join(', ')}`);
  }
}
