/**
 * `wait` mode's wait for a request in flight: the store's `waitFor` when it has one, else polling `get`.
 *
 * @module
 */
import type { Clock } from './clock.js';
import { StoreUnavailableError } from './errors.js';
import type { StoreOperation } from './observer.js';
import type { IdempotencyRecord } from './record.js';
import type { OperationId } from './receiver.js';
import type { IdempotencyStore } from './store.js';

/** A store call made through the engine, so the observer sees it. */
type ObservedCall = <T>(operation: StoreOperation, call: () => Promise<T>) => Promise<T>;

/**
 * Waits until the record of `id` changes state (completed, released, lease expired) or `timeoutMs`
 * milliseconds pass, polling every `pollIntervalMs` on a store without `waitFor`.
 *
 * @throws {@link StoreUnavailableError} when the store fails
 */
export async function waitForChange(
  store: IdempotencyStore,
  id: OperationId,
  timeoutMs: number,
  options: { readonly pollIntervalMs: number; readonly clock: Clock },
  observed: ObservedCall,
): Promise<IdempotencyRecord | undefined> {
  try {
    const waitFor = store.waitFor?.bind(store);
    if (waitFor) return await observed('wait_for', () => waitFor(id.scope, id.key, timeoutMs));
    const get = (): Promise<IdempotencyRecord | undefined> => observed('get', () => store.get(id.scope, id.key));
    let record = await get();
    for (let waited = 0; waited < timeoutMs; waited += options.pollIntervalMs) {
      if (record?.state !== 'in_progress' || record.leaseExpiresAt <= options.clock.now()) break;
      await new Promise((resolve) => setTimeout(resolve, Math.min(options.pollIntervalMs, timeoutMs - waited)));
      record = await get();
    }
    return record;
  } catch (error) {
    throw new StoreUnavailableError(error);
  }
}
