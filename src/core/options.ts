/**
 * Validation of the injected dependencies every factory takes (time and ids are
 * injected). Each check runs once, in the factory, on the value after its default was applied.
 *
 * @module
 */
import type { Clock } from './clock.js';
import { describe } from './duration.js';

/**
 * Returns `value` if it is a {@link Clock} (an object with a `now()` method).
 *
 * @throws TypeError naming the option `clock` and the value otherwise
 */
export function requireClock(value: unknown): Clock {
  if (typeof value !== 'object' || value === null || typeof (value as Partial<Clock>).now !== 'function') {
    throw new TypeError(`retrysafe: option "clock" must have a now() method, got ${describe(value)}`);
  }
  return value as Clock;
}

/**
 * Returns `value` if it is a function, to be called as an id generator (`generateId`).
 *
 * @throws TypeError naming the option `generateId` and the value otherwise
 */
export function requireGenerateId(value: unknown): () => string {
  if (typeof value !== 'function') {
    throw new TypeError(`retrysafe: option "generateId" must be a function, got ${describe(value)}`);
  }
  return value as () => string;
}

/**
 * Asserts that a factory's `options` argument is an object, the check every factory runs first so
 * that a missing or misplaced argument fails where it was passed rather than at first use.
 *
 * @param factory - the factory's name as the caller wrote it, e.g. `createPostgresStore`
 * @throws TypeError naming the factory and the value when `options` is not an object (or is `null`)
 */
export function requireOptions<T>(factory: string, options: T): asserts options is T & object {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: ${factory} expects an options object, got ${describe(options)}`);
  }
}
