/**
 * Large response bodies kept aside: what the etcd store writes to, and reads from, the side store its
 * `responseStore` option names, while the record and its lease stay in etcd.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { IdempotencyRecord, StoredResponse } from '../../core/record.js';
import type { ResponseBodyId, ResponseBodyStore } from '../../core/response-bodies.js';
import type { ExternalBody, StoredRecord } from './layout.js';
import { ETCD_LEASE_GRACE_MS } from './leases.js';

/** The id of the body the holder of `stored` (its fencing token) completes or completed the record with. */
export function bodyIdOf(stored: StoredRecord): ResponseBodyId {
  return { scope: stored.record.scope, key: stored.record.key, fencingToken: stored.fence };
}

/** The length and SHA-256 of `body`, which the record's head keeps so a replay checks what it reads back. */
export function externalOf(body: Uint8Array): ExternalBody {
  return { bytes: body.byteLength, sha256: createHash('sha256').update(body).digest('hex') };
}

/**
 * When the side store keeps a body written at `now` for a retention of `retentionMs` (milliseconds): the
 * record's own retention end plus {@link ETCD_LEASE_GRACE_MS}, so the body outlives every read of the record.
 */
export function bodyExpiresAt(now: number, retentionMs: number): number {
  return now + retentionMs + ETCD_LEASE_GRACE_MS;
}

/**
 * The record of `stored` with its body: read back from `side` when the head says it is kept there and the
 * bytes read have the length and SHA-256 the head recorded. A body missing or different (deleted by hand,
 * or written by an attempt of the same holder that did not commit) leaves the record in the 410 form
 * (`idempotency-response-not-kept`): a replay never serves bytes the completion did not commit.
 *
 * @throws the side store's error when it fails
 */
export async function withBody(side: ResponseBodyStore | undefined, stored: StoredRecord): Promise<IdempotencyRecord> {
  const { external, record } = stored;
  if (external === undefined || side === undefined || record.response === undefined) return record;
  const body = await side.get(bodyIdOf(stored));
  if (body === undefined || body.byteLength !== external.bytes || externalOf(body).sha256 !== external.sha256) return record;
  const response: StoredResponse = { status: record.response.status, headers: external.headers, body };
  return { ...record, response };
}
