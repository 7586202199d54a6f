/**
 * The console's resolution of an indeterminate record (`POST /api/indeterminate/resolve`), as
 * `retrysafe gateway resolve` does it: "mark done with this response" completes the record with the
 * response the operator gives, which every retry then replays; "release" deletes it, so the next retry
 * sends the request. Both are fenced by the lease token the operator saw: a record resolved, expired or
 * held again since is left alone and the answer says so.
 *
 * @module
 */
import type { StoredResponse } from '../core/record.js';
import type { IdempotencyStore } from '../core/store.js';
import { claimOnRecord, indeterminateMarkOf } from '../gateway/indeterminate.js';

/** How long a record completed from the console is replayed: 24 hours, as `retrysafe gateway resolve`'s default. */
const RESOLVED_RETENTION_MS = 24 * 3_600_000;

/** The outcome: an HTTP status and a JSON body (a problem's title and detail when not 200). */
interface ResolveAnswer {
  readonly status: 200 | 400 | 404 | 409;
  readonly title: string;
  readonly detail?: string;
  readonly resolved?: 'completed' | 'released';
}

/** The request's `{ status, headers, body }` as a response to save, or the reason it is not one. */
function responseOf(body: Record<string, unknown>): StoredResponse | string {
  const { status, headers = {}, body: text = '' } = body;
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599) return 'status must be an HTTP status (100 to 599)';
  if (typeof text !== 'string') return 'body must be a string (the response body as UTF-8 text)';
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return 'headers must be an object of header names to values';
  const saved: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers as Record<string, unknown>)) {
    if (typeof value !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) return `header ${JSON.stringify(name)} must be a token name with a string value`;
    // Never saved for replay (the HTTP adapters' rule): a cookie is one client's, not every retry's.
    if (name.toLowerCase() === 'set-cookie') return 'set-cookie is never saved for replay';
    saved[name.toLowerCase()] = value;
  }
  return { status, headers: saved, body: new TextEncoder().encode(text) };
}

/**
 * Resolves the indeterminate record `body` names: `{ scope, key, leaseToken, action: 'release' }` or
 * `{ scope, key, leaseToken, action: 'complete', status, headers?, body? }` (`body` as UTF-8 text).
 *
 * @returns 200 with `resolved`; 400 for a malformed request; 404 when the record is gone; 409 when it is
 *   no longer indeterminate under that lease token (resolved, or held again by a later request), or it
 *   changed between the read and the fenced write
 * @throws the store's error
 */
export async function resolveHeld(store: IdempotencyStore, body: Record<string, unknown>): Promise<ResolveAnswer> {
  const { scope, key, leaseToken, action } = body;
  if (typeof scope !== 'string' || typeof key !== 'string' || typeof leaseToken !== 'string') return { status: 400, title: 'scope, key and leaseToken are required strings' };
  if (action !== 'complete' && action !== 'release') return { status: 400, title: 'action must be "complete" or "release"' };
  const response = action === 'complete' ? responseOf(body) : undefined;
  if (typeof response === 'string') return { status: 400, title: 'Not a response to save', detail: response };
  const record = await store.get(scope, key);
  if (record === undefined) return { status: 404, title: 'No such record', detail: 'the record is gone: resolved by someone else, or expired' };
  if (indeterminateMarkOf(record) === undefined || record.leaseToken !== leaseToken) {
    return { status: 409, title: 'Not resolved', detail: `the record is no longer indeterminate under that lease token (now ${record.state === 'completed' ? 'completed' : 'in progress'})` };
  }
  const claim = claimOnRecord(record);
  const done = response === undefined ? await store.release(claim) : await store.complete(claim, response, RESOLVED_RETENTION_MS);
  if (!done) return { status: 409, title: 'Not resolved', detail: 'the record changed while it was being resolved; look at it again' };
  return response === undefined ? { status: 200, title: 'Released', resolved: 'released' } : { status: 200, title: 'Completed', resolved: 'completed' };
}
