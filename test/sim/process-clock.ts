/**
 * This process's wall clock, skewed on purpose: `Date.now()` (which the system clock, and so every store
 * left on its default, reads) returns the real time plus an offset the simulation moves. The servers keep
 * their own time.
 */
const realNow = Date.now.bind(Date);

/** A skew of `Date.now()` that the simulation moves by jumps, forwards and backwards. */
export class ProcessClockSkew {
  private offsetMs = 0;

  /** The current skew in milliseconds (positive: this process's clock runs ahead). */
  get offset(): number {
    return this.offsetMs;
  }

  /** Jumps this process's clock by `ms` milliseconds (negative: back). */
  jump(ms: number): void {
    this.offsetMs += ms;
    const offset = this.offsetMs;
    Date.now = () => realNow() + offset;
  }

  /** Puts the real clock back. */
  restore(): void {
    this.offsetMs = 0;
    Date.now = realNow;
  }
}
