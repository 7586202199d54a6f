/**
 * The handler timeout shared by the inbox stores.
 *
 * @module
 */
import { HandlerTimeoutError } from './errors.js';
import type { TransactionHandler } from './store.js';

/**
 * Runs `fn(tx, signal)`; if it has not settled after `timeoutMs` milliseconds, aborts `signal`, calls
 * `onTimeout` (where the store makes sure the transaction can no longer commit) and rejects with a
 * {@link HandlerTimeoutError}. With `settleFirst`, the rejection waits until `fn` settles, for stores
 * whose connection `fn` would otherwise keep writing on outside the transaction.
 */
export async function runWithTimeout<Tx>(
  fn: TransactionHandler<Tx>,
  tx: Tx,
  timeoutMs: number,
  onTimeout: (error: HandlerTimeoutError) => void,
  settleFirst = false,
): Promise<void> {
  const controller = new AbortController();
  const running = fn(tx, controller.signal);
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  try {
    const first = await Promise.race([running, expired]);
    if (first !== 'timeout') return;
  } finally {
    clearTimeout(timer);
  }
  const error = new HandlerTimeoutError(timeoutMs);
  controller.abort(error);
  onTimeout(error);
  // Promise.race already observes a later rejection of `running`, so it never goes unhandled.
  if (settleFirst) await running.catch(() => undefined);
  throw error;
}
