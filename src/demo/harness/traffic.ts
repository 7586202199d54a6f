/**
 * The demos' one traffic driver: `concurrency` workers take the planned operations (payments or orders)
 * in order, each sending one logical POST per operation (or a burst of concurrent calls under one key)
 * with the planned fault header, and record what every call finally got.
 *
 * @module
 */
import { RetryExhaustedError, type RetryingFetch } from '../../client/fetch.js';
import type { PlannedPayment } from './plan.js';
import { FAULT_HEADER } from './chaos.js';
import type { DriveTally } from './progress.js';

/** How one logical call ended. */
export interface CallResult {
  readonly key: string;
  /** Final HTTP status, when the call got a non-retryable answer. */
  readonly status?: number;
  /** Final response body (text), when there was one. */
  readonly body?: string;
  /** Why the call gave up (retries exhausted), when it did. */
  readonly error?: string;
}

/**
 * The `concurrency` option of a demo run: the workers {@link drive} runs, 12 unless given.
 *
 * @throws TypeError when `concurrency` is not an integer in [1, 256]
 */
export function concurrencyOf(concurrency: number = 12): number {
  if (!Number.isSafeInteger(concurrency) || concurrency < 1 || concurrency > 256) {
    throw new TypeError(`retrysafe: option "concurrency" must be an integer in [1, 256], got ${String(concurrency)}`);
  }
  return concurrency;
}

/** Options of {@link drive}. */
interface DriveOptions {
  readonly plan: readonly PlannedPayment[];
  /** Workers sending operations at once. */
  readonly concurrency: number;
  /** `http://host:port` of the API under test. */
  readonly origin: string;
  /** The path every operation is POSTed to, e.g. `/payments`. */
  readonly path: string;
  readonly fetch: RetryingFetch;
  /** Aborts every call (the server failed in a way the demo did not cause). */
  readonly signal: AbortSignal;
  /** Counted up as operations go out and end, for the progress line. */
  readonly tally?: DriveTally;
}

/**
 * Sends every planned operation and resolves with one {@link CallResult} per call (a burst gives several).
 * Rejects with `signal.reason` when `signal` aborts.
 */
export async function drive(options: DriveOptions): Promise<readonly CallResult[]> {
  const { plan, origin, path, signal } = options;
  const results: CallResult[] = [];
  let next = 0;
  const pay = async (payment: PlannedPayment): Promise<void> => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (payment.fault !== 'none' && payment.fault !== 'burst') headers[FAULT_HEADER] = payment.fault;
    try {
      const response = await options.fetch(`${origin}${path}`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ amount: payment.amountCents, currency: payment.currency }),
        idempotencyKey: payment.key,
        signal,
      });
      results.push({ key: payment.key, status: response.status, body: await response.text() });
    } catch (error) {
      if (!(error instanceof RetryExhaustedError)) throw error;
      results.push({ key: payment.key, error: error.message });
    }
  };
  const worker = async (): Promise<void> => {
    for (;;) {
      const payment = plan[next++];
      if (payment === undefined) return;
      if (options.tally) options.tally.sent++;
      await Promise.all(Array.from({ length: payment.copies }, () => pay(payment)));
      if (options.tally) options.tally.answered++;
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  return results;
}
