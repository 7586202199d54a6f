/**
 * One store call observed as a {@link StoreOperation}: the observer hears how it ended.
 *
 * @module
 */
import type { ReceiverObserver, StoreCallResult, StoreOperation } from './observer.js';

// Hot path: docs/hot-path.md#engine-store-calls
/**
 * Makes one store call, observed as `operation` on `observer`; `result` tells the observer how it ended.
 * Not an `async` function: it chains once onto the store's own promise, where an `async` wrapper would cost
 * every store call one more promise and hop. Rejects as the store's call did.
 */
export function observedCall<T>(observer: ReceiverObserver, operation: StoreOperation, call: () => Promise<T>, result: (value: T) => StoreCallResult): Promise<T> {
  const observation = observer.storeCall(operation);
  let pending: Promise<T>;
  try {
    pending = Promise.resolve(call());
  } catch (error) {
    observation.fail(error);
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the store's own throw, passed on as it came, as an `async` function would
    return Promise.reject(error);
  }
  return pending.then(
    (value) => {
      observation.end(result(value));
      return value;
    },
    (error: unknown) => {
      observation.fail(error);
      throw error;
    },
  );
}
