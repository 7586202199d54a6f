/**
 * The progress line a demo reports while it runs, so a long or stuck run shows where it is.
 *
 * @module
 */

/** How often a demo reports its progress, in milliseconds. */
const PROGRESS_EVERY_MS = 2_000;

/** What {@link drive} has done so far: logical operations (payments, orders) sent and answered. */
export interface DriveTally {
  /** Operations whose first call went out. */
  sent: number;
  /** Operations whose every call (a burst has several) ended, with an answer or by giving up. */
  answered: number;
}

/**
 * Calls `report` with `line()` every {@link PROGRESS_EVERY_MS} until the returned function is called; does
 * nothing when `report` is `undefined`. The timer does not keep the process alive.
 */
export function reportProgress(report: ((line: string) => void) | undefined, line: () => string): () => void {
  if (report === undefined) return () => undefined;
  const timer = setInterval(() => report(line()), PROGRESS_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
