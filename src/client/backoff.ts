/**
 * Exponential backoff with full jitter, from Marc Brooker's "Exponential Backoff And Jitter" (AWS
 * Architecture Blog, 2015) and the AWS Builders' Library article "Timeouts, retries, and backoff with
 * jitter": spreading retries uniformly over `[0, ceiling)` keeps a crowd of clients that failed together
 * from retrying together.
 *
 * @module
 */

/**
 * The wait before the retry that follows attempt number `attempt`.
 *
 * @param attempt - the 1-based number of the attempt that just failed
 * @param baseDelayMs - ceiling after the first attempt, in milliseconds; it doubles with each attempt
 * @param maxDelayMs - cap of the ceiling, in milliseconds
 * @param random - a source of numbers in `[0, 1)`, like `Math.random`
 * @returns a whole number of milliseconds in `[0, min(maxDelayMs, baseDelayMs × 2^(attempt−1)))`
 */
export function fullJitterDelay(attempt: number, baseDelayMs: number, maxDelayMs: number, random: () => number): number {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  // An injected source may return exactly 1 or stray outside the range; never exceed the ceiling.
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.min(Math.floor(r * ceiling), Math.max(0, ceiling - 1));
}
