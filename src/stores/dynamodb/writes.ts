/**
 * The record writes both the plain store and transactional mode make: the lease-token condition, the
 * completion's update expression and values, and a response too large for an item.
 *
 * @module
 */
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../../core/record.js';
import type { DynamodbStoreConfig } from './config.js';
import { n, s, ttlSeconds, type Item } from './layout.js';

/** The record is `in_progress` under the caller's token. */
export const HELD = '#leaseToken = :token AND #state = :inProgress';

/** The completion (the body is set by a `, #body = :body` appended when there is one). */
export const COMPLETE_SET =
  'SET #state = :completed, #status = :status, #headers = :headers, #completedAt = :now, #expiresAt = :expires, #ttl = :ttl';

/** The values of {@link COMPLETE_SET} and {@link HELD} for `claim` completing with `response` at `now`. */
export function completionValues(config: DynamodbStoreConfig, claim: Claim, response: StoredResponse, now: number, retentionMs: number): Item {
  const values: Item = {
    ':token': s(claim.leaseToken),
    ':inProgress': s('in_progress'),
    ':completed': s('completed'),
    ':status': n(response.status),
    ':headers': s(JSON.stringify(response.headers)),
    ':now': n(now),
    ':expires': n(now + retentionMs),
    ':ttl': n(ttlSeconds(now + retentionMs, config.ttlGraceSeconds)),
  };
  // DynamoDB refuses an empty binary attribute: an empty body is no attribute.
  if (response.body.byteLength > 0) values[':body'] = { B: response.body };
  return values;
}

/** `response` without its body, marked so its replay is a 410 problem. */
export function notKept(response: StoredResponse): StoredResponse {
  return {
    status: response.status,
    headers: { ...response.headers, [RESPONSE_NOT_KEPT_HEADER]: String(response.body.byteLength) },
    body: new Uint8Array(0),
  };
}
