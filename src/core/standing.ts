/**
 * How a record that stands in the way of a claim is answered, the one rule the engine and the phase
 * runner share: a key reused with another fingerprint is refused, a completed record is replayed, anything
 * else is a request still in flight (the caller decides whether to wait or refuse).
 *
 * Source: IETF draft-ietf-httpapi-idempotency-key-header, section 2.7 (422 for a reused key, 409 for a
 * request in flight); Stripe's idempotent requests (replay of the saved response).
 *
 * @module
 */
import { IdempotencyKeyReusedError } from './errors.js';
import type { OperationId } from './receiver.js';
import type { IdempotencyRecord, StoredResponse } from './record.js';

/**
 * Answers `record`, which stands where `request` wanted to claim: the saved response to replay when the
 * record is completed, or `undefined` when it is still in flight. The fingerprint is checked first: a
 * reused key is an error however the record stands.
 *
 * @throws {@link IdempotencyKeyReusedError} when the record was claimed with another fingerprint (422)
 */
export function answerStanding(record: IdempotencyRecord, request: OperationId): StoredResponse | undefined {
  if (record.fingerprint !== request.fingerprint) throw new IdempotencyKeyReusedError(record);
  return record.state === 'completed' ? record.response : undefined;
}
