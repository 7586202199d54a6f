/**
 * Bulk endpoints: one HTTP request whose body holds many items, each its own idempotent operation, answered
 * with one result per item (a `207 Multi-Status`-style body). Built on `Receiver.runBatch`, so the items are
 * claimed together and each runs at most once. The whole response is rebuilt from the items' saved results:
 * a retry of the same request replays every item and so gets the same body, and a batch re-sent with some
 * items changed replays the unchanged ones and runs (or refuses) only the changed ones. Framework-free: an
 * Express or Fastify route hands it the `Idempotency-Key` header and the parsed items (docs/batches.md).
 *
 * Sources: RFC 4918 section 13 (207 Multi-Status, one status per member); IETF
 * draft-ietf-httpapi-idempotency-key-header, section 2.7 (422 for a reused key, 409 for one in flight).
 *
 * @module
 */
import type { BatchContext, BatchItem, BatchOutcome } from '../core/batch.js';
import { IdempotencyError, IdempotencyKeyInvalidError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { parseIdempotencyKey } from '../core/key.js';
import type { Receiver } from '../core/receiver.js';
import { requireFunction, requireNonEmptyString, requireObject } from '../core/validate.js';

/** Options of {@link createBulkHandler}. */
export interface BulkHandlerOptions<Tx, T> {
  readonly receiver: Receiver<Tx>;
  /** The scope of every item's key (a tenant, a principal, the route). */
  readonly scope: string;
  /** The route named in each item's fingerprint, e.g. `POST /payments/bulk`. */
  readonly route: string;
  /** Runs one item (its parsed JSON); the result is saved and replayed as the item's `body`. */
  readonly run: (item: unknown, context: BatchContext<Tx>) => Promise<T>;
  /**
   * The item's own idempotency key, or `undefined` to derive one from the request's `Idempotency-Key`
   * and the item's index (`<batch key>:<index>`). @defaultValue the item's `idempotencyKey` member when it
   * is a string
   */
  readonly itemKey?: (item: unknown) => string | undefined;
  /** How many items run at once. @defaultValue 8 */
  readonly concurrency?: number;
}

/** One item's result in a bulk response. */
export interface BulkItemResult {
  /** The item's index in the request's array. */
  readonly index: number;
  /** The item's key (its own, or derived); absent when it had none. */
  readonly key?: string;
  /** The item's status: 200 done (now or earlier), 400 no usable key, 409 in flight, 422 key reused, 500 failed. */
  readonly status: 200 | 400 | 409 | 422 | 500;
  /** The item's result (status 200). */
  readonly body?: unknown;
  /** Why the item was not done: the error's code and message (statuses 400 to 500). */
  readonly error?: { readonly code: string; readonly title: string };
}

/** A bulk response: 207 with one result per item, or 400 when the items are not an array. */
export interface BulkResponse {
  readonly status: 207 | 400;
  /** Lower-case names; `idempotent-replayed: true` when every item was a replay. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: { readonly results: readonly BulkItemResult[] } | { readonly code: string; readonly title: string };
}

/** What a bulk request carries: the `Idempotency-Key` header (if any) and the parsed items. */
export interface BulkRequest {
  readonly batchKey: string | undefined;
  readonly items: unknown;
}

const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' });
const REPLAYED_HEADERS = Object.freeze({ 'content-type': 'application/json', 'idempotent-replayed': 'true' });
const HTTP_STATUS = { executed: 200, replayed: 200, in_flight: 409, mismatch: 422, failed: 500 } as const;

/**
 * Creates the handler of a bulk endpoint. Never rejects for an item: a failed item is a 500 member of the
 * 207 body, and its key is released so a retry runs it again.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * const bulk = createBulkHandler({ receiver, scope: 'payments', route: 'POST /payments/bulk', run: (item) => charge(item) });
 * app.post('/payments/bulk', express.json(), async (req, res) => {
 *   const answer = await bulk({ batchKey: req.get('idempotency-key'), items: req.body?.items });
 *   res.status(answer.status).set(answer.headers).json(answer.body);
 * });
 * ```
 */
export function createBulkHandler<Tx, T>(options: BulkHandlerOptions<Tx, T>): (request: BulkRequest) => Promise<BulkResponse> {
  const receiver = requireObject<Receiver<Tx>>('receiver', options.receiver, 'createBulkHandler');
  const scope = requireNonEmptyString('scope', options.scope, Number.MAX_SAFE_INTEGER, 'createBulkHandler');
  const route = requireNonEmptyString('route', options.route, Number.MAX_SAFE_INTEGER, 'createBulkHandler');
  const run = requireFunction<BulkHandlerOptions<Tx, T>['run']>('run', options.run, 'createBulkHandler');
  const itemKey = requireFunction<(item: unknown) => string | undefined>('itemKey', options.itemKey ?? ownKey, 'createBulkHandler');
  const concurrency = options.concurrency;
  return async (request) => {
    if (!Array.isArray(request.items)) {
      return { status: 400, headers: JSON_HEADERS, body: { code: 'bulk-items-invalid', title: 'The request body must hold an array of items.' } };
    }
    const items: readonly unknown[] = request.items;
    const results = new Array<BulkItemResult>(items.length);
    const batch: (BatchItem<unknown> & { readonly index: number })[] = [];
    for (const [index, item] of items.entries()) {
      const key = keyOf(itemKey(item), request.batchKey, index);
      if (key instanceof IdempotencyError) results[index] = { index, status: 400, error: errorOf(key) };
      else batch.push({ scope, key, fingerprint: fingerprint({ method: 'BULK', route, body: JSON.stringify(item) }), input: item, index });
    }
    const outcomes = await receiver.runBatch(batch, run, concurrency === undefined ? {} : { concurrency });
    outcomes.forEach((outcome, at) => {
      const index = (batch[at] as { readonly index: number }).index;
      results[index] = resultOf(index, outcome);
    });
    const replayed = outcomes.length === items.length && outcomes.every((outcome) => outcome.status === 'replayed');
    return { status: 207, headers: replayed ? REPLAYED_HEADERS : JSON_HEADERS, body: { results } };
  };
}

/** The default item key: the item's `idempotencyKey` member when it is a string. */
function ownKey(item: unknown): string | undefined {
  const key = typeof item === 'object' && item !== null ? (item as { idempotencyKey?: unknown }).idempotencyKey : undefined;
  return typeof key === 'string' ? key : undefined;
}

/** The item's key: its own, else derived from the batch key and its index; an error when it has neither or its own is invalid. */
function keyOf(own: string | undefined, batchKey: string | undefined, index: number): string | IdempotencyError {
  try {
    if (own !== undefined) return parseIdempotencyKey(own);
    if (batchKey === undefined) return new IdempotencyKeyInvalidError('the item has no idempotencyKey and the request no Idempotency-Key');
    return `${parseIdempotencyKey(batchKey)}:${index}`;
  } catch (error) {
    if (error instanceof IdempotencyError) return error;
    throw error;
  }
}

/** One item's result from its batch outcome. */
function resultOf(index: number, outcome: BatchOutcome<unknown>): BulkItemResult {
  const at = { index, key: outcome.key, status: HTTP_STATUS[outcome.status] };
  if (outcome.status === 'executed' || outcome.status === 'replayed') return { ...at, body: outcome.value };
  return { ...at, error: errorOf(outcome.error) };
}

/** An error as a bulk result names it; the work's own errors are not shown (only that the item failed). */
function errorOf(error: unknown): { readonly code: string; readonly title: string } {
  if (error instanceof IdempotencyError) return { code: error.code, title: error.message };
  return { code: 'bulk-item-failed', title: 'The item failed; it was not saved, and a retry runs it again.' };
}
