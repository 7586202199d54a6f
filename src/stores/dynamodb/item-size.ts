/**
 * Whether a completed record fits in one DynamoDB item (400 KB, attribute names included).
 *
 * @module
 */
import type { Claim, StoredResponse } from '../../core/record.js';

/** DynamoDB's item size limit, in bytes: names and values of every attribute count. */
const ITEM_LIMIT_BYTES = 400 * 1024;

/**
 * Bytes kept free for what the estimate does not measure exactly: the key attributes, the numbers (at
 * most 21 bytes each), the attribute names and a recovery point written after `claim` was taken.
 */
const MARGIN_BYTES = 4 * 1024;

/**
 * `true` when the completed record of `claim` with `response` stays under {@link ITEM_LIMIT_BYTES}: an
 * estimate that errs on the large side, so a response it passes is one DynamoDB accepts.
 */
export function fitsInItem(claim: Claim, response: StoredResponse): boolean {
  let bytes = MARGIN_BYTES + response.body.byteLength;
  bytes += Buffer.byteLength(claim.scope) * 2 + Buffer.byteLength(claim.key) * 2;
  bytes += claim.fingerprint.length + claim.leaseToken.length;
  if (claim.recoveryPoint !== undefined) bytes += Buffer.byteLength(claim.recoveryPoint);
  bytes += Buffer.byteLength(JSON.stringify(response.headers));
  return bytes <= ITEM_LIMIT_BYTES;
}
