/**
 * An operator's resolution of an indeterminate record: "it was done, and this was the answer"
 * (complete it with that response, which every retry then replays) or "it was not done" (release it, so
 * the next retry sends the request). Both are fenced by the lease token read from the record, so a record
 * that changed meanwhile (resolved by the reconcile hook, expired, reused) is left alone.
 *
 * @module
 */
import { ModuleError } from '../core/errors.js';
import type { StoredResponse } from '../core/record.js';
import type { IdempotencyStore } from '../core/store.js';
import { claimOnRecord, indeterminateMarkOf } from './indeterminate.js';

/** Why a record could not be resolved. */
export class ResolveRefusedError extends ModuleError<'gateway-resolve-refused'> {
  override readonly name = 'ResolveRefusedError';
  constructor(message: string) {
    super('gateway-resolve-refused', message);
  }
}

/** What to do with the record: complete it with `response`, kept `retentionMs` milliseconds, or release it. */
export type Resolution = { readonly kind: 'complete'; readonly response: StoredResponse; readonly retentionMs: number } | { readonly kind: 'release' };

/**
 * Resolves the indeterminate record of (scope, key).
 *
 * @throws {@link ResolveRefusedError} when there is no such record, it is not indeterminate, or it
 *   changed between the read and the write (the fenced write was refused)
 * @throws the store's error
 * @example
 * ```ts
 * await resolveIndeterminate(store, 'api-key:…', 'order-17', { kind: 'release' });
 * ```
 */
export async function resolveIndeterminate(store: IdempotencyStore, scope: string, key: string, resolution: Resolution): Promise<void> {
  const record = await store.get(scope, key);
  const name = `scope ${JSON.stringify(scope)} key ${JSON.stringify(key)}`;
  if (record === undefined) throw new ResolveRefusedError(`no record for ${name}`);
  if (indeterminateMarkOf(record) === undefined) throw new ResolveRefusedError(`the record for ${name} is ${record.state}, not indeterminate`);
  const claim = claimOnRecord(record);
  const done = resolution.kind === 'complete' ? await store.complete(claim, resolution.response, resolution.retentionMs) : await store.release(claim);
  if (!done) throw new ResolveRefusedError(`the record for ${name} changed while it was being resolved; look at it again`);
}
