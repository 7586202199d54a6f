/**
 * The logger hook: one structured line per notable outcome, for any logger with pino's calling
 * convention (`logger.warn(object, message)`; pino, bunyan-style loggers and `console`-backed adapters fit).
 * Keys are never logged raw: a key may carry a client's data or be guessable, so each line carries
 * `keyHash`, the first 16 hex digits of the SHA-256 of `scope`, a NUL and `key` — enough to find the
 * record with `retrysafe inspect` and to correlate lines, nothing to read the key from.
 *
 * @module
 */
import { createHash } from 'node:crypto';

/** A pino-compatible logger: each method takes the line's fields, then its message. */
export interface Logger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/**
 * The notable outcomes logged (the `event` field of each line), with their level:
 * - `mismatch` (warn): a key reused with another fingerprint;
 * - `lease_lost` (warn): a work finished after its lease was taken over; its response was not saved;
 * - `takeover` (warn): a claim took over an expired lease (the holder crashed or outran its lease);
 * - `store_unavailable` (error): the store failed; the request was refused with a 503;
 * - `completion_given_up` (error): plain mode's work ran, but every try of its completion for
 *   `completionRetryMs` failed; the response went out unsaved, and a retry after the lease runs the work again;
 * - `should_persist_threw` (error): the `shouldPersist` option threw (the line's `err` is what it threw); the
 *   work's response was saved, as if it had returned `true`, and sent;
 * - `dead_letter` (error): the inbox dead-lettered a message (fields `consumer`, `messageIdHash`,
 *   `reason`, `attempts`; see `createInbox`'s `logger`).
 */
export type LogEvent = 'mismatch' | 'lease_lost' | 'takeover' | 'store_unavailable' | 'completion_given_up' | 'should_persist_threw' | 'dead_letter';

/**
 * The short hash of (scope, key) that log lines carry instead of the key: 16 hex digits of SHA-256.
 *
 * @example
 * ```ts
 * keyHash('tenant-a', '8e03978e-40d5-43e8-bc93-6894a57f9324'); // → 16 hex digits
 * ```
 */
export function keyHash(scope: string, key: string): string {
  return createHash('sha256').update(scope).update('\0').update(key).digest('hex').slice(0, 16);
}

const LEVELS: Readonly<Record<LogEvent, 'warn' | 'error'>> = Object.freeze({
  mismatch: 'warn',
  lease_lost: 'warn',
  takeover: 'warn',
  store_unavailable: 'error',
  completion_given_up: 'error',
  should_persist_threw: 'error',
  dead_letter: 'error',
});

const MESSAGES: Readonly<Record<LogEvent, string>> = Object.freeze({
  mismatch: 'idempotency key reused with another request fingerprint',
  lease_lost: 'lease taken over before completion; response not saved',
  takeover: 'claim took over an expired lease',
  store_unavailable: 'idempotency store unavailable',
  completion_given_up: 'completion kept failing for completionRetryMs; response sent unsaved',
  should_persist_threw: 'shouldPersist threw; response saved as if it returned true',
  dead_letter: 'message dead-lettered',
});

/**
 * Writes one line for `event` to `logger` (nothing when `logger` is undefined). A throwing logger is
 * ignored: a log line must never change a request's outcome.
 */
export function logEvent(logger: Logger | undefined, event: LogEvent, fields: Readonly<Record<string, unknown>>): void {
  if (logger === undefined) return;
  try {
    logger[LEVELS[event]]({ event, ...fields }, `retrysafe: ${MESSAGES[event]}`);
  } catch {
    return;
  }
}
