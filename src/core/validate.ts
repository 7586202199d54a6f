/**
 * The one validation module. Every factory checks its options once, as a column of one-line calls to
 * these helpers; each throws a `TypeError` whose message names the option (or the operation) and the value
 * it got: `retrysafe: option "leaseMs" must be a positive integer number of milliseconds, got -1`.
 * Durations are in **milliseconds**. Internal: not exported from the package root.
 *
 * The `name` of each helper is the option's name as the user wrote it; `owner`, when given, is the
 * factory or adapter the option belongs to (`startAmqpConsumer option "prefetch" …`).
 *
 * @module
 */
import type { Clock } from './clock.js';
import type { IdempotencyStore } from './store.js';

/** Renders a value for an error message. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  try {
    return String(JSON.stringify(value) ?? value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** The subject of an option's message: `option "name"`, or `owner option "name"`. */
function subject(name: string, owner: string | undefined): string {
  return owner === undefined ? `option "${name}"` : `${owner} option "${name}"`;
}

/**
 * The `TypeError` every check throws: `retrysafe: <option "name"> must be <expected>, got <value>`.
 *
 * @param name - the option's name as the user wrote it
 * @param expected - what it must be, e.g. `"a function"`
 * @param value - what it was
 * @param owner - the factory or adapter the option belongs to, when the message should name it
 */
export function invalidOption(name: string, expected: string, value: unknown, owner?: string): TypeError {
  return new TypeError(`retrysafe: ${subject(name, owner)} must be ${expected}, got ${describe(value)}`);
}

/**
 * Asserts that a factory's `options` argument is an object, the check every factory runs first so that a
 * missing or misplaced argument fails where it was passed rather than at first use.
 *
 * @param factory - the factory's name as the caller wrote it, e.g. `createPostgresStore`
 * @throws TypeError naming the factory and the value when `options` is not an object (or is `null`)
 */
export function requireOptions<T>(factory: string, options: T): asserts options is T & object {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: ${factory} expects an options object, got ${describe(options)}`);
  }
}

/**
 * Returns `value` if it is a positive safe integer number of milliseconds.
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireDurationMs(name: string, value: unknown, owner?: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw invalidOption(name, 'a positive integer number of milliseconds', value, owner);
  }
  return value;
}

/**
 * Returns `value` if it is a non-negative safe integer number of milliseconds (`0` allowed).
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireNonNegativeMs(name: string, value: unknown, owner?: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalidOption(name, 'a non-negative integer number of milliseconds', value, owner);
  }
  return value;
}

/**
 * Returns `value` if it is a safe integer from `min` to `max` (both included).
 *
 * @throws TypeError naming the option, the range and the value otherwise
 */
export function requireIntegerIn(name: string, value: unknown, min: number, max: number, owner?: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw invalidOption(name, `an integer from ${min} to ${max}`, value, owner);
  }
  return value;
}

/**
 * Returns `value` if it is a positive safe integer (a count: a batch size, a number of attempts).
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireCount(name: string, value: unknown, owner?: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw invalidOption(name, 'a positive integer', value, owner);
  }
  return value;
}

/**
 * Returns `limit` if it is a positive safe integer: the bound of a store's bounded query (`reap`,
 * `listRecords`, `countExpiredLeases`, …).
 *
 * @param operation - the query's name, e.g. `listRecords`
 * @throws TypeError `retrysafe: <operation> limit must be a positive integer, got <value>` otherwise
 */
export function requireLimit(operation: string, limit: unknown): number {
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit <= 0) {
    throw new TypeError(`retrysafe: ${operation} limit must be a positive integer, got ${describe(limit)}`);
  }
  return limit;
}

/**
 * Returns `value` if it is a function.
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireFunction<F extends (...args: never[]) => unknown>(name: string, value: unknown, owner?: string): F {
  if (typeof value !== 'function') throw invalidOption(name, 'a function', value, owner);
  return value as F;
}

/**
 * Returns `value` if it is `true` or `false`.
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireBoolean(name: string, value: unknown, owner?: string): boolean {
  if (typeof value !== 'boolean') throw invalidOption(name, 'a boolean', value, owner);
  return value;
}

/**
 * Returns `value` if it is a non-empty string of at most `maxLength` characters.
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireNonEmptyString(name: string, value: unknown, maxLength = Number.MAX_SAFE_INTEGER, owner?: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > maxLength) {
    const bound = maxLength === Number.MAX_SAFE_INTEGER ? '' : ` of at most ${maxLength} characters`;
    throw invalidOption(name, `a non-empty string${bound}`, value, owner);
  }
  return value;
}

/**
 * Returns `value` if it is one of `choices`.
 *
 * @throws TypeError naming the option, the choices and the value otherwise
 */
export function requireOneOf<const T extends string>(name: string, value: unknown, choices: readonly T[], owner?: string): T {
  if (typeof value !== 'string' || !(choices as readonly string[]).includes(value)) {
    const listed = choices.map((choice) => `"${choice}"`);
    const expected = listed.length <= 1 ? listed.join('') : `${listed.slice(0, -1).join(', ')} or ${listed.at(-1)}`;
    throw invalidOption(name, expected, value, owner);
  }
  return value as T;
}

/**
 * Returns `value` if it is a non-null object (not an array).
 *
 * @throws TypeError naming the option and the value otherwise
 */
export function requireObject<T extends object>(name: string, value: unknown, owner?: string): T {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidOption(name, 'an object', value, owner);
  return value as T;
}

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
  return requireFunction<() => string>('generateId', value);
}

/**
 * Asserts that exactly one of the two options `first` and `second` of `owner` is given (not `undefined`).
 *
 * @param owner - the factory the options were given to, e.g. `createPostgresStore`
 * @throws TypeError `retrysafe: <owner> needs exactly one of the options "<first>" and "<second>"` otherwise
 */
export function requireExactlyOne(owner: string, first: string, firstValue: unknown, second: string, secondValue: unknown): void {
  if ((firstValue === undefined) === (secondValue === undefined)) {
    throw new TypeError(`retrysafe: ${owner} needs exactly one of the options "${first}" and "${second}"`);
  }
}

/**
 * Returns `value` if it is at most `limit`, the value of the option `limitName`: the check of two options
 * whose order matters (`leaseMs` within `retentionMs`, `baseDelayMs` within `maxDelayMs`). Both are
 * checked on their own first.
 *
 * @throws TypeError `retrysafe: option "<name>" (<value>) must not exceed "<limitName>" (<limit>)` otherwise
 */
export function requireAtMost(name: string, value: number, limitName: string, limit: number): number {
  if (value > limit) throw new TypeError(`retrysafe: option "${name}" (${value}) must not exceed "${limitName}" (${limit})`);
  return value;
}

/**
 * Returns `value` if it is an {@link IdempotencyStore} (an object with a `claim()` method), the check of
 * the `store` option of the receiver and the phase runner.
 *
 * @throws TypeError naming the option `store` and the value otherwise
 */
export function requireIdempotencyStore<S extends IdempotencyStore>(value: S): S {
  const store = value as unknown;
  if (typeof store !== 'object' || store === null || typeof (store as Partial<IdempotencyStore>).claim !== 'function') {
    throw invalidOption('store', 'an IdempotencyStore', store);
  }
  return value;
}
