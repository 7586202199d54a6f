/**
 * The reconcile hook: a route may name a path on its upstream that answers, for an idempotency key, what
 * became of the request sent under it. `GET {upstream}{reconcile}?key=<key>`:
 * - `404`: the upstream never executed it (and will not): the record is released, and the request may
 *   be sent again;
 * - any other status below 500: that is the original response (status, headers, body), and the record
 *   is completed with it, so every retry replays it;
 * - a 5xx, a timeout or a broken connection: still unknown; the record stays held.
 *
 * @module
 */
import type { Claim, StoredResponse } from '../core/record.js';
import type { IdempotencyStore } from '../core/store.js';
import type { RouteConfig } from './config.js';
import { clientHeaders, replayedHeaders } from './headers.js';
import type { Upstream } from './upstream.js';

/** What the reconcile hook said. */
type Reconciliation =
  | { readonly kind: 'completed'; readonly response: StoredResponse }
  | { readonly kind: 'not-executed' }
  | { readonly kind: 'unknown' };

const UNKNOWN: Reconciliation = Object.freeze({ kind: 'unknown' });

/** Asks the route's reconcile hook about `key`; never throws (a failure is `unknown`). */
export async function askUpstream(route: RouteConfig, upstream: Upstream, key: string): Promise<Reconciliation> {
  if (route.reconcilePath === undefined) return UNKNOWN;
  const separator = route.reconcilePath.includes('?') ? '&' : '?';
  try {
    const answer = await upstream.fetch(`${route.reconcilePath}${separator}key=${encodeURIComponent(key)}`, route.timeoutMs);
    if (answer.status === 404) return { kind: 'not-executed' };
    if (answer.status >= 500) return UNKNOWN;
    return { kind: 'completed', response: { status: answer.status, headers: replayedHeaders(clientHeaders(answer.headers), route.replayHeaders), body: answer.body } };
  } catch {
    return UNKNOWN;
  }
}

/**
 * Resolves the held record `claim` names by the hook's answer, fenced by its lease token: completes it
 * with the original response or releases it.
 *
 * @returns the answer, `unknown` when the hook did not know or the record was resolved meanwhile
 * @throws the store's error
 */
export async function reconcile(route: RouteConfig, upstream: Upstream, store: IdempotencyStore, claim: Claim): Promise<Reconciliation> {
  const answer = await askUpstream(route, upstream, claim.key);
  if (answer.kind === 'completed') return (await store.complete(claim, answer.response, route.ttlMs)) ? answer : UNKNOWN;
  if (answer.kind === 'not-executed') return (await store.release(claim)) ? answer : UNKNOWN;
  return answer;
}
