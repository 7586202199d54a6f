/**
 * A small seeded pseudo-random generator (mulberry32), so a demo run's faults repeat exactly under the
 * same `--seed`. Not for anything secret.
 *
 * @module
 */

/** A deterministic source of random numbers. */
interface Random {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [min, max] (both inclusive). */
  int(min: number, max: number): number;
  /** One element of a non-empty array. */
  pick<T>(items: readonly [T, ...T[]]): T;
}

/**
 * Creates a generator from a 32-bit seed (mulberry32, Tommy Ettinger's public-domain generator).
 *
 * @example
 * ```ts
 * const random = createRandom(42);
 * random.int(1, 6); // the same sequence on every run with seed 42
 * ```
 */
export function createRandom(seed: number): Random {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: <T>(items: readonly [T, ...T[]]): T => items[Math.floor(next() * items.length)] ?? items[0],
  };
}
