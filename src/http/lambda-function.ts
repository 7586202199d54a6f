/**
 * `idempotentFunction`: any Lambda handler (SQS, EventBridge, Step Functions, a direct invocation) run once
 * per idempotency key, its JSON result replayed to every retry with the key.
 *
 * @module
 */
import type { Context } from 'aws-lambda';
import { IdempotencyKeyMissingError, ResponseNotKeptError } from '../core/errors.js';
import { fingerprint as fingerprintOf } from '../core/fingerprint.js';
import { RESPONSE_NOT_KEPT_HEADER } from '../core/record.js';
import type { Receiver } from '../core/receiver.js';
import { requireFunction, requireOptions } from '../core/validate.js';
import { boundLeaseToInvocation } from './lambda-lease.js';

/** Options of {@link idempotentFunction}. */
export interface IdempotentFunctionOptions<E> {
  /** The receiver (store, lease, retention) the function runs under. */
  readonly receiver: Receiver<unknown>;
  /**
   * The idempotency key of an event, e.g. `(event) => event.orderId`; `undefined` or `''` throws
   * {@link IdempotencyKeyMissingError} without running the function.
   */
  readonly key: (event: E) => string | undefined;
  /**
   * What of the event must match for a retry to be the same request (JSON-encoded and hashed); another
   * value under a known key throws `IdempotencyKeyReusedError`. @defaultValue the whole event
   */
  readonly fingerprint?: (event: E) => unknown;
  /** The scope of an event's key. @defaultValue `context.functionName` */
  readonly scope?: (event: E, context: Context) => string;
}

/**
 * Wraps `fn` so it runs once per key: the first invocation claims the key and saves `fn`'s result (as
 * JSON), every later invocation with the key returns that result without running `fn`. The lease ends no
 * later than the invocation (`context.getRemainingTimeInMillis()`), so a retry after a timeout takes the
 * key over at once. A throw releases the key (the next retry runs again) and is rethrown.
 *
 * @throws (as a rejection) {@link IdempotencyKeyMissingError} when `key` gives no key,
 *   `IdempotencyKeyReusedError` for another fingerprint under the key, `RequestInProgressError` while the
 *   first invocation still runs, `StoreUnavailableError` when the store fails before `fn` ran,
 *   {@link ResponseNotKeptError} for a result too large for the store (a replay only), or what `fn` throws
 * @throws TypeError when an option is invalid (at wrap time)
 * @example
 * ```ts
 * export const handler = idempotentFunction(async (event: { orderId: string }) => charge(event), {
 *   receiver,
 *   key: (event) => event.orderId,
 * });
 * ```
 */
export function idempotentFunction<E, R>(
  fn: (event: E, context: Context) => Promise<R>,
  options: IdempotentFunctionOptions<E>,
): (event: E, context: Context) => Promise<R> {
  requireFunction('fn', fn, 'idempotentFunction');
  requireOptions('idempotentFunction', options);
  const { receiver } = options;
  const key = requireFunction<(event: E) => string | undefined>('key', options.key, 'idempotentFunction');
  const payload = options.fingerprint ?? ((event: E) => event);
  requireFunction('fingerprint', payload, 'idempotentFunction');
  const scope = options.scope ?? ((_event: E, context: Context) => context.functionName);
  requireFunction('scope', scope, 'idempotentFunction');
  return async (event, context) => {
    const id = key(event);
    if (id === undefined || id === '') throw new IdempotencyKeyMissingError('This invocation has no idempotency key (option "key" gave none).');
    const body = JSON.stringify(payload(event)) ?? '';
    const operation = { scope: scope(event, context), key: id, fingerprint: fingerprintOf({ method: 'INVOKE', route: '', body }) };
    const execution = await receiver.execute(operation, async ({ claim }) => {
      await boundLeaseToInvocation(receiver, claim, context);
      const text = JSON.stringify(await fn(event, context)) as string | undefined;
      return { status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(text ?? '') };
    });
    const { response } = execution;
    const notKept = response.headers[RESPONSE_NOT_KEPT_HEADER];
    if (notKept !== undefined) throw new ResponseNotKeptError(response.status, Number(notKept));
    return (response.body.byteLength === 0 ? undefined : JSON.parse(Buffer.from(response.body).toString('utf8'))) as R;
  };
}
