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

/** A running progress report: `now()` reports the line at once (the final tally), `stop()` ends it. */
interface Progress {
  now(): void;
  stop(): void;
}

/**
 * Calls `report` with `line()` every {@link PROGRESS_EVERY_MS} until `stop()` is called, and at once on
 * `now()`; does nothing when `report` is `undefined`. The timer does not keep the process alive.
 */
export function reportProgress(report: ((line: string) => void) | undefined, line: () => string): Progress {
  if (report === undefined) return { now: () => undefined, stop: () => undefined };
  const timer = setInterval(() => report(line()), PROGRESS_EVERY_MS);
  timer.unref();
  return { now: () => report(line()), stop: () => clearInterval(timer) };
}
