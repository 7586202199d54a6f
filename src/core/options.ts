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
