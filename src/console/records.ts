/**
 * The console's view of idempotency records: the pages of `GET /api/keys` (by state, including the two
 * states the store does not index, "stuck" and "indeterminate") and the JSON shape of one record.
 *
 * "stuck" is an in-progress record whose lease has expired (its holder died or hangs) and that the gateway
 * does not hold; "indeterminate" is one `retrysafe gateway` holds because the upstream's outcome is unknown
 * (`src/gateway/indeterminate.ts`). Neither is a column of any store, so their pages are found by walking
 * the in-progress records in (scope, key) order and keeping the matching ones, at most
 * {@link SCAN_LIMIT} records per page asked for.
 *
 * @module
 */
import type { IdempotencyRecord } from '../core/record.js';
import type { RecordQuery } from '../core/store.js';
import { indeterminateMarkOf } from '../gateway/indeterminate.js';

/** The states `GET /api/keys?state=` accepts (empty: every record). */
type KeysState = '' | 'in_progress' | 'completed' | 'stuck' | 'indeterminate';

const STATES: readonly KeysState[] = ['', 'in_progress', 'completed', 'stuck', 'indeterminate'];

/** Whether `text` names one of the {@link KeysState}s. */
export function isKeysState(text: string): text is KeysState {
  return (STATES as readonly string[]).includes(text);
}

/** The most in-progress records one page of "stuck" or "indeterminate" records walks through. */
const SCAN_LIMIT = 5_000;

const SCAN_BATCH = 200;

/** One page of records, and the cursor of the next one when there may be more. */
interface RecordPage {
  readonly records: readonly IdempotencyRecord[];
  readonly next?: { readonly scope: string; readonly key: string };
}

/** Whether the record is stuck at `now` (milliseconds since the epoch). */
function isStuck(record: IdempotencyRecord, now: number): boolean {
  return record.state === 'in_progress' && record.leaseExpiresAt <= now && indeterminateMarkOf(record) === undefined;
}

/**
 * One page of at most `limit` records in `state`, in (scope, key) order.
 *
 * @param list - the store's `listRecords`
 * @param query - the scope, key prefix and cursor of the page (its `state` and `limit` are set here)
 * @throws the store's error
 */
export async function pageOf(
  list: (query: RecordQuery) => Promise<IdempotencyRecord[]>,
  state: KeysState,
  query: Omit<RecordQuery, 'state' | 'limit'>,
  limit: number,
  now: number,
): Promise<RecordPage> {
  if (state !== 'stuck' && state !== 'indeterminate') {
    const records = await list({ ...query, limit: limit + 1, ...(state !== '' && { state }) });
    return cut(records, limit, records.length > limit);
  }
  const keep = state === 'stuck' ? (record: IdempotencyRecord) => isStuck(record, now) : (record: IdempotencyRecord) => indeterminateMarkOf(record) !== undefined;
  const found: IdempotencyRecord[] = [];
  let after = query.after;
  for (let scanned = 0; scanned < SCAN_LIMIT; ) {
    const batch = await list({ ...query, state: 'in_progress', limit: SCAN_BATCH, ...(after !== undefined && { after }) });
    scanned += batch.length;
    for (const record of batch) {
      if (!keep(record)) continue;
      found.push(record);
      if (found.length > limit) return cut(found, limit, true);
    }
    const last = batch[batch.length - 1];
    if (batch.length < SCAN_BATCH || last === undefined) return cut(found, limit, false);
    after = { scope: last.scope, key: last.key };
  }
  // The walk stopped short: the next page goes on from the last record it read.
  return after === undefined ? { records: found } : { records: found, next: after };
}

function cut(records: readonly IdempotencyRecord[], limit: number, more: boolean): RecordPage {
  const page = records.slice(0, limit);
  const last = page[page.length - 1];
  return more && last !== undefined ? { records: page, next: { scope: last.scope, key: last.key } } : { records: page };
}

/** A record as the keys list shows it. Times are ISO 8601 UTC; `leaseExpiresAt` and `leaseToken` are null for a completed record. */
export function summary(record: IdempotencyRecord, now: number): Record<string, unknown> {
  const mark = indeterminateMarkOf(record);
  return {
    scope: record.scope,
    key: record.key,
    state: record.state,
    // An in-progress record past its lease is stuck: its holder died or hangs.
    stuck: isStuck(record, now),
    indeterminate: mark ?? null,
    // A completed record has no lease any more; the time its last lease had is meaningless.
    leaseExpiresAt: record.state === 'in_progress' ? new Date(record.leaseExpiresAt).toISOString() : null,
    // The fencing token a release of an in-progress record must name (the bulk release of the keys list).
    leaseToken: record.state === 'in_progress' ? record.leaseToken : null,
    createdAt: new Date(record.createdAt).toISOString(),
    status: record.response?.status ?? null,
  };
}

/** A record in full, as the detail pane shows it. */
export function detail(record: IdempotencyRecord, now: number): Record<string, unknown> {
  return {
    ...summary(record, now),
    fingerprint: record.fingerprint,
    leaseToken: record.leaseToken,
    expiresAt: new Date(record.expiresAt).toISOString(),
    completedAt: record.completedAt === undefined ? null : new Date(record.completedAt).toISOString(),
    recoveryPoint: record.recoveryPoint ?? null,
    headers: record.response?.headers ?? null,
    size: record.response?.body.byteLength ?? null,
  };
}
