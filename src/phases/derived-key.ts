/**
 * Derived keys: the idempotency key an atomic phase hands to a foreign API (a card network, a mail
 * provider) so that the foreign side deduplicates too. A phase that crashed after the foreign call but
 * before its recovery point committed runs again on the retry; the same derived key makes the foreign API
 * answer the first call's result instead of acting twice.
 *
 * Source: Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres" (foreign state mutations);
 * Stripe's idempotent requests (the key a caller sends to Stripe).
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { OperationId } from '../core/receiver.js';

/** Domain separator, so a derived key never equals a hash of the same fields made for another purpose. */
const DOMAIN = 'retrysafe/derived-key/v1';

/**
 * The derived key of `step` within the operation `id`: 64 lower-case hex characters, the SHA-256 of the
 * length-prefixed fields `retrysafe/derived-key/v1`, scope, key, fingerprint and step.
 *
 * Stable: the same (scope, key, fingerprint, step) always gives the same key, in any process and release
 * with the same `v1` prefix. The fingerprint is included so that a key reused after its retention expired,
 * for another request, never collides with the earlier request's foreign calls. Different steps of one
 * operation get unrelated keys, so a phase that makes two foreign calls gives each its own step name.
 *
 * @param id - the operation (scope, key, fingerprint) the phase belongs to
 * @param step - the caller's name for the foreign call, e.g. `"charge"`; any string, compared exactly
 * @example
 * ```ts
 * await cards.charge({ amount: 1200 }, { idempotencyKey: derivedKey(id, 'charge') });
 * ```
 */
export function derivedKey(id: OperationId, step: string): string {
  const hash = createHash('sha256');
  // Lengths prefix each field so that no two different inputs concatenate alike.
  for (const field of [DOMAIN, id.scope, id.key, id.fingerprint, step]) {
    hash.update(`${Buffer.byteLength(field)}:`).update(field);
  }
  return hash.digest('hex');
}
