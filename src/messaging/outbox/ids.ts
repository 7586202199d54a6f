/**
 * Message ids. An id is fixed when the row is written and never changes, so every publish attempt carries
 * the same one. Inside an inbox handler the id is derived from what caused it, so a handler that runs
 * again (its first run rolled back) emits the same ids instead of minting new ones.
 *
 * @module
 */
import { createHash } from 'node:crypto';

/**
 * The UUID namespace of derived outbox ids (itself a random UUID, fixed forever: changing it would change
 * every derived id).
 */
export const OUTBOX_ID_NAMESPACE = '5b0f1f36-6c3e-4f7e-9f1a-2f4c1e8d7a90';

/**
 * A name-based UUID (RFC 9562 section 5.5, version 5: SHA-1 of namespace and name) for the `index`-th
 * message emitted while handling `causationId` in `consumer`.
 *
 * @example
 * ```ts
 * derivedMessageId('billing', 'order-created-42', 0); // the same UUID on every run
 * ```
 */
export function derivedMessageId(consumer: string, causationId: string, index: number): string {
  const namespace = Buffer.from(OUTBOX_ID_NAMESPACE.replaceAll('-', ''), 'hex');
  // JSON keeps the parts apart: ("a", "b:c") and ("a:b", "c") give different names.
  const name = Buffer.from(JSON.stringify([consumer, causationId, index]), 'utf8');
  const hash = createHash('sha1').update(namespace).update(name).digest();
  hash[6] = ((hash[6] ?? 0) & 0x0f) | 0x50;
  hash[8] = ((hash[8] ?? 0) & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
