/**
 * Injected time, so TTLs and leases are tested with fake clocks instead of sleeps.
 *
 * @module
 */

/** A source of the current time in milliseconds since the Unix epoch. */
export interface Clock {
  now(): number;
}

/** The wall clock (`Date.now()`). */
export const systemClock: Clock = Object.freeze({ now: () => Date.now() });

/**
 * A clock that moves only when told to; for tests.
 *
 * @example
 * ```ts
 * const clock = new ManualClock(0);
 * clock.advance(60_000); // one minute later
 * ```
 */
export class ManualClock implements Clock {
  constructor(private current = 0) {}
  now(): number {
    return this.current;
  }
  /** Moves time forward by `ms` milliseconds. */
  advance(ms: number): void {
    this.current += ms;
  }
  /** Sets the time to `ms` milliseconds since the epoch. */
  set(ms: number): void {
    this.current = ms;
  }
}
