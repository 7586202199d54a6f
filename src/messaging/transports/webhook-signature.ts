/**
 * Webhook signatures as in the Standard Webhooks specification (https://www.standardwebhooks.com,
 * "Signature scheme"): HMAC-SHA256 over `${id}.${timestamp}.${body}`, sent as `webhook-signature:
 * v1,<base64>` next to `webhook-id` and `webhook-timestamp` (seconds since the epoch). The timestamp is
 * signed, so a receiver can refuse stale replays of a captured request.
 *
 * @module
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Header names of the scheme (lower case, as Node exposes incoming headers). */
export const WEBHOOK_HEADERS = Object.freeze({
  id: 'webhook-id',
  timestamp: 'webhook-timestamp',
  signature: 'webhook-signature',
});

/**
 * The `webhook-signature` value for a message: `v1,` and the base64 HMAC-SHA256 of
 * `${id}.${timestampSeconds}.${body}` under `secret`.
 */
export function signWebhook(secret: string | Uint8Array, id: string, timestampSeconds: number, body: Uint8Array): string {
  const mac = createHmac('sha256', secret).update(`${id}.${timestampSeconds}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

/** What {@link verifyWebhook} checks. */
export interface WebhookVerification {
  /** The `webhook-id` header. */
  readonly id: string | undefined;
  /** The `webhook-timestamp` header (seconds). */
  readonly timestamp: string | undefined;
  /** The `webhook-signature` header: one or more space-separated `v1,<base64>` entries (key rotation). */
  readonly signature: string | undefined;
  /** The raw request body, exactly as received. */
  readonly body: Uint8Array;
  /** The receiver's current time, milliseconds since the epoch. */
  readonly nowMs: number;
  /** How far the timestamp may be from `nowMs`, in milliseconds. @defaultValue 300_000 (5 minutes) */
  readonly toleranceMs?: number;
}

/**
 * For a receiver: true when one of the signatures matches (compared in constant time) and the timestamp
 * is within tolerance; false otherwise (missing headers included). Never throws on bad input.
 *
 * @example
 * ```ts
 * const ok = verifyWebhook(secret, { id: req.headers['webhook-id'], timestamp: req.headers['webhook-timestamp'],
 *   signature: req.headers['webhook-signature'], body: rawBody, nowMs: Date.now() });
 * ```
 */
export function verifyWebhook(secret: string | Uint8Array, input: WebhookVerification): boolean {
  const { id, timestamp, signature, body, nowMs } = input;
  const toleranceMs = input.toleranceMs ?? 300_000;
  if (id === undefined || timestamp === undefined || signature === undefined || !/^\d{1,15}$/.test(timestamp)) return false;
  const seconds = Number(timestamp);
  if (Math.abs(nowMs - seconds * 1000) > toleranceMs) return false;
  const expected = Buffer.from(signWebhook(secret, id, seconds, body));
  return signature.split(' ').some((candidate) => {
    const given = Buffer.from(candidate);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
