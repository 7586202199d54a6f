/**
 * Sends the planned orders to `POST /orders` with the demo's retrying client: one logical call per order
 * (a burst sends several concurrent calls under one key), the planned fault header on the first attempts.
 *
 * @module
 */
import { RetryExhaustedError, type RetryingFetch } from '../../../client/fetch.js';
import type { PlannedPayment } from '../plan.js';
import { FAULT_HEADER } from '../protocol.js';

/** Options of {@link placeOrders}. */
export interface PlaceOrdersOptions {
  /** The plan (the payments plan's shape: key, amount, currency, fault, copies). */
  readonly plan: readonly PlannedPayment[];
  /** Orders in flight at once. */
  readonly concurrency: number;
  /** `http://host:port` of the order API. */
  readonly origin: string;
  readonly fetch: RetryingFetch;
  readonly signal: AbortSignal;
}

/** Places every planned order; resolves with the keys whose calls gave up (retries exhausted or a non-201 answer). */
export async function placeOrders(options: PlaceOrdersOptions): Promise<readonly string[]> {
  const { plan, origin, signal } = options;
  const failed: string[] = [];
  let next = 0;
  const place = async (order: PlannedPayment): Promise<void> => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (order.fault !== 'none' && order.fault !== 'burst') headers[FAULT_HEADER] = order.fault;
    try {
      const response = await options.fetch(`${origin}/orders`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ amount: order.amountCents, currency: order.currency }),
        idempotencyKey: order.key,
        signal,
      });
      await response.arrayBuffer();
      if (response.status !== 201) failed.push(order.key);
    } catch (error) {
      if (!(error instanceof RetryExhaustedError)) throw error;
      failed.push(order.key);
    }
  };
  const worker = async (): Promise<void> => {
    for (;;) {
      const order = plan[next++];
      if (order === undefined) return;
      await Promise.all(Array.from({ length: order.copies }, () => place(order)));
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  return failed;
}
