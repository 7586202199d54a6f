/**
 * The typed errors of the inbox, under their own root {@link InboxError}, which extends `IdempotencyError`.
 *
 * @module
 */
import { ModuleError } from '../../core/errors.js';

/** Stable machine-readable codes of {@link InboxError}. */
export type InboxErrorCode = 'inbox-message-id-missing' | 'inbox-handler-timeout';

/** Root of every error the inbox throws on purpose; its `code` is an {@link InboxErrorCode}. */
export class InboxError extends ModuleError<InboxErrorCode> {
  override readonly name: string = 'InboxError';
}

/**
 * The message carries no usable id (absent, empty, longer than {@link MAX_MESSAGE_ID_LENGTH} characters
 * or containing NUL), so it cannot be deduplicated; the inbox refuses it rather than process it without
 * dedup. Broker adapters reject such a message without requeue.
 */
export class MessageIdMissingError extends InboxError {
  override readonly name = 'MessageIdMissingError';
  constructor(readonly reason: string) {
    super('inbox-message-id-missing', `The message has no usable id (${reason}); it is rejected, never processed without dedup.`);
  }
}

/**
 * The handler did not settle within `handlerTimeoutMs`; its transaction was rolled back and the run
 * counted as a failed attempt.
 */
export class HandlerTimeoutError extends InboxError {
  override readonly name = 'HandlerTimeoutError';
  constructor(readonly timeoutMs: number) {
    super('inbox-handler-timeout', `The inbox handler did not finish within ${timeoutMs} ms; its transaction was rolled back.`);
  }
}

/** Longest accepted message id and consumer name, in characters. */
export const MAX_MESSAGE_ID_LENGTH = 255;

/** How a handler's failure is recorded with its attempt row (`last_error`): `Name: message`, or the thrown value as text. */
export function failureText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
