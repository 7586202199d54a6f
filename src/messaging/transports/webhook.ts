/**
 * `retrysafe/webhook`: the outbox relay's HTTP webhook publisher (`undici`). Each message is POSTed with
 * its id as the `Idempotency-Key` (IETF draft-ietf-httpapi-idempotency-key-header), so a receiver using
 * retrysafe's middleware applies a republished message once, and with a Standard Webhooks signature
 * (see `webhook-signature.ts`).
 *
 * @module
 */
import { request, type Dispatcher } from 'undici';
import { systemClock, type Clock } from '../../core/clock.js';
import { requireClock, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import { describe, requireDurationMs } from '../../core/validate.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';
import { signWebhook, WEBHOOK_HEADERS } from './webhook-signature.js';

export { signWebhook, verifyWebhook, WEBHOOK_HEADERS, type WebhookVerification } from './webhook-signature.js';

/** Options of {@link createWebhookPublisher}. */
export interface WebhookPublisherOptions {
  /** The endpoint: one URL, or a function choosing one per message (e.g. by `topic`). http(s) only. */
  readonly url: string | ((message: OutboxMessage) => string);
  /** The HMAC-SHA256 key shared with the receiver (at least 16 bytes). */
  readonly secret: string | Uint8Array;
  /** `Content-Type` when the message headers set none. @defaultValue 'application/json' */
  readonly contentType?: string;
  /** Time source of the signed timestamp (milliseconds). @defaultValue the system clock */
  readonly clock?: Clock;
  /** undici dispatcher (an `Agent` with your pool and TLS settings). @defaultValue undici's global dispatcher */
  readonly dispatcher?: Dispatcher;
  /** Time to wait for the response headers, in milliseconds. @defaultValue 10_000 */
  readonly timeoutMs?: number;
}

/**
 * Creates a webhook publisher. Request: `POST`, body = the payload bytes, headers = the message headers
 * plus `Idempotency-Key: <id>`, `webhook-id`, `webhook-timestamp`, `webhook-signature`.
 *
 * Outcomes: 2xx confirms. 408, 429 and 5xx, timeouts and network errors reject with a transient
 * `PublishError` (the relay retries with backoff). Any other status (3xx, 4xx) rejects with a *permanent*
 * `PublishError`: the receiver refused this message and will refuse it again, so the relay dead-letters it
 * at once with the status in the reason instead of retrying `maxAttempts` times.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * const publisher = createWebhookPublisher({ url: 'https://hooks.example.com/orders', secret: process.env.WEBHOOK_SECRET! });
 * const relay = createRelay({ pool, outbox, publisher });
 * ```
 */
export function createWebhookPublisher(options: WebhookPublisherOptions): OutboxPublisher {
  requireOptions('createWebhookPublisher', options);
  const { url, secret, dispatcher } = options;
  if (typeof url === 'string') checkUrl(url);
  else if (typeof url !== 'function') {
    throw new TypeError(`retrysafe: option "url" must be an http(s) URL or a function, got ${describe(url)}`);
  }
  const secretLength = typeof secret === 'string' ? Buffer.byteLength(secret) : secret instanceof Uint8Array ? secret.byteLength : -1;
  if (secretLength < 16) {
    throw new TypeError(`retrysafe: option "secret" must be a string or bytes of at least 16 bytes, got ${secretLength < 0 ? describe(secret) : `${secretLength} bytes`}`);
  }
  const contentType = requireNonEmptyString('contentType', options.contentType ?? 'application/json');
  const clock = requireClock(options.clock ?? systemClock);
  if (dispatcher !== undefined && (typeof dispatcher !== 'object' || dispatcher === null || typeof dispatcher.dispatch !== 'function')) {
    throw new TypeError(`retrysafe: option "dispatcher" must be an undici Dispatcher, got ${describe(dispatcher)}`);
  }
  const timeoutMs = requireDurationMs('timeoutMs', options.timeoutMs ?? 10_000);
  const target = typeof url === 'string' ? () => url : (message: OutboxMessage) => checkUrl(url(message));

  return Object.freeze({
    async publish(message: OutboxMessage, signal: AbortSignal): Promise<void> {
      let endpoint: string;
      try {
        endpoint = target(message);
      } catch (error) {
        // The message's own content chose no valid endpoint: it will not choose one on a retry either.
        throw new PublishError(`No webhook URL for the message: ${error instanceof Error ? error.message : String(error)}`, true, { cause: error });
      }
      const timestamp = Math.floor(clock.now() / 1000);
      const headers: Record<string, string> = {
        'content-type': contentType,
        ...lowerCased(message.headers),
        'idempotency-key': message.id,
        [WEBHOOK_HEADERS.id]: message.id,
        [WEBHOOK_HEADERS.timestamp]: String(timestamp),
        [WEBHOOK_HEADERS.signature]: signWebhook(secret, message.id, timestamp, message.payload),
      };
      let status: number;
      try {
        const response = await request(endpoint, {
          method: 'POST',
          headers,
          body: message.payload,
          signal,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
          ...(dispatcher === undefined ? {} : { dispatcher }),
        });
        status = response.statusCode;
        await response.body.dump();
      } catch (error) {
        throw new PublishError(`The webhook ${endpoint} could not be reached: ${error instanceof Error ? error.message : String(error)}`, false, { cause: error });
      }
      if (status >= 200 && status < 300) return;
      const transient = status === 408 || status === 429 || status >= 500;
      throw new PublishError(`The webhook ${endpoint} answered ${status}.`, !transient);
    },
    close(): Promise<void> {
      return Promise.resolve();
    },
  });
}

function checkUrl(url: string): string {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
    throw new TypeError(`retrysafe: option "url" must be an http(s) URL, got ${describe(url)}`);
  }
  return url;
}

function lowerCased(headers: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]));
}
