/**
 * Promises that carry their value where the caller can read it at once: what a store that decides in this
 * process returns when it has the answer at the call (the memory store from `claim`, `complete` and
 * `release`; the SQLite store from a `claim` that a standing record refuses), so the engine goes on in the
 * same turn instead of waiting a microtask for a value it already has. A caller that does not look (any
 * other code, a wrapper that chains its own `then`) sees an ordinary resolved promise.
 *
 * @module
 */

const VALUE = Symbol('retrysafe.settled');

/** Returned by {@link settledValue} for a promise that carries no value. */
export const UNSETTLED: unique symbol = Symbol('retrysafe.unsettled');

type Carrier<T> = Promise<T> & { [VALUE]?: T };

/** A promise resolved with `value` that also carries it for {@link settledValue}. */
export function settled<T>(value: T): Promise<T> {
  const promise: Carrier<T> = Promise.resolve(value);
  promise[VALUE] = value;
  return promise;
}

/** The value `promise` was made with by {@link settled}, or {@link UNSETTLED} for any other promise. */
export function settledValue<T>(promise: Promise<T>): T | typeof UNSETTLED {
  return VALUE in promise ? ((promise as Carrier<T>)[VALUE] as T) : UNSETTLED;
}
