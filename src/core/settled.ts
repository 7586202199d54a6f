/**
 * Promises that carry their value where the caller can read it at once: what a store that decides in this
 * process returns when it has the answer at the call (the memory store from `claim`, `complete` and
 * `release`; the SQLite store from a `claim` that a standing record refuses), so the engine goes on in the
 * same turn instead of waiting a microtask for a value it already has. A caller that does not look (any
 * other code, a wrapper that chains its own `then`) sees an ordinary resolved promise.
 *
 * A {@link Pending} is the same for a value that comes later: its maker settles it, and the one step
 * listening to it (`whenSettled`, `listen`) goes on in that call, so a chain of steps over a value that
 * arrives synchronously (a Fastify handler's response handed over in `onSend`, saved by the memory store)
 * ends in the call that handed it over.
 *
 * @module
 */

const VALUE = Symbol('retrysafe.settled');
const LISTENER = Symbol('retrysafe.listener');
/** A settled {@link Pending}'s listener slot. */
const DONE = Symbol('retrysafe.done');

/** Returned by {@link settledValue} for a promise that carries no value. */
export const UNSETTLED: unique symbol = Symbol('retrysafe.unsettled');

interface Listener<T> {
  value(value: T): void;
  error(error: unknown): void;
}

/** A promise with its value (once it has one), and for a {@link Pending}'s: its listener slot (`null`: none yet). */
type Carrier<T> = Promise<T> & { [VALUE]?: T; [LISTENER]?: Listener<T> | null | typeof DONE };

/** A promise resolved with `value` that also carries it for {@link settledValue}. */
export function settled<T>(value: T): Promise<T> {
  const promise: Carrier<T> = Promise.resolve(value);
  promise[VALUE] = value;
  return promise;
}

/** The value `promise` was made with by {@link settled} (or a {@link Pending}'s, once resolved), or {@link UNSETTLED} for any other promise. */
export function settledValue<T>(promise: Promise<T>): T | typeof UNSETTLED {
  return VALUE in promise ? ((promise as Carrier<T>)[VALUE] as T) : UNSETTLED;
}

// Hot path: docs/hot-path.md#fastify-same-turn-completion
/**
 * A promise its maker settles later (`resolve`, `reject`), which a step waiting on it with
 * {@link whenSettled} or {@link listen} hears in the settling call. Once resolved it carries its value, as a
 * {@link settled} promise does. Any other caller sees an ordinary promise.
 */
export class Pending<T> {
  readonly promise: Carrier<T>;
  private resolvePromise!: (value: T) => void;
  private rejectPromise!: (error: unknown) => void;

  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolvePromise = resolve;
      this.rejectPromise = reject;
    });
    this.promise[LISTENER] = null;
  }

  /** Resolves the promise with `value` and calls its listener, if any; nothing once settled. */
  resolve(value: T): void {
    const promise = this.promise;
    const listener = promise[LISTENER];
    if (listener === DONE) return;
    promise[VALUE] = value;
    promise[LISTENER] = DONE;
    this.resolvePromise(value);
    if (listener) listener.value(value);
  }

  /** Rejects the promise with `error` and calls its listener, if any; nothing once settled. */
  reject(error: unknown): void {
    const promise = this.promise;
    const listener = promise[LISTENER];
    if (listener === DONE) return;
    promise[LISTENER] = DONE;
    // Heard by its listener: not an unhandled rejection.
    if (listener) promise.catch(ignore);
    this.rejectPromise(error);
    if (listener) listener.error(error);
  }

  /** Settles the promise as `produce` returns or throws; a promise it returns is waited for with {@link listen}. */
  settleWith(produce: () => T | Promise<T>): void {
    let result: T | Promise<T>;
    try {
      result = produce();
    } catch (error) {
      this.reject(error);
      return;
    }
    if (result instanceof Promise) listen(result, (value) => this.resolve(value), (error) => this.reject(error));
    else this.resolve(result);
  }
}

/**
 * Calls `onValue` or `onError` once `promise` settles: at once for a promise carrying its value, in the
 * settling call for a {@link Pending}'s that no one listens to yet, else from its `then`. The callbacks must
 * not throw.
 */
export function listen<T>(promise: Promise<T>, onValue: (value: T) => void, onError: (error: unknown) => void): void {
  const carrier = promise as Carrier<T>;
  if (VALUE in carrier) onValue(carrier[VALUE]);
  else if (carrier[LISTENER] === null) carrier[LISTENER] = { value: onValue, error: onError };
  else promise.then(onValue, onError);
}

/**
 * `promise.then(onValue, onError)` without the microtask where the value is at hand: for a promise carrying
 * its value, `onValue`'s own result (or throw); for a {@link Pending}'s that no one listens to yet, a
 * `Pending`'s promise settled in the call that settles `promise`; for any other, `then`'s promise. Without
 * `onError`, a rejection is passed on.
 */
export function whenSettled<T, R>(
  promise: Promise<T>,
  onValue: (value: T) => R | Promise<R>,
  onError?: (error: unknown) => R | Promise<R>,
): R | Promise<R> {
  const carrier = promise as Carrier<T>;
  if (VALUE in carrier) return onValue(carrier[VALUE]);
  if (carrier[LISTENER] !== null) return promise.then(onValue, onError);
  const next = new Pending<R>();
  carrier[LISTENER] = {
    value: (value) => next.settleWith(() => onValue(value)),
    error: onError === undefined ? (error) => next.reject(error) : (error) => next.settleWith(() => onError(error)),
  };
  return next.promise;
}

function ignore(): void {}
