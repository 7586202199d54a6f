/**
 * The typed errors of the outbox relay and its publishers, under their own root {@link OutboxError}, which
 * extends `IdempotencyError`.
 *
 * @module
 */
import { ModuleError } from '../../core/errors.js';

/** Stable machine-readable codes of {@link OutboxError}. */
export type OutboxErrorCode = 'outbox-publish-failed' | 'outbox-publish-timeout';

/** Root of every error the outbox throws on purpose; its `code` is an {@link OutboxErrorCode}. */
export class OutboxError extends ModuleError<OutboxErrorCode> {
  override readonly name: string = 'OutboxError';
}

/**
 * A publisher could not get the broker's confirm for a message. `permanent` tells the relay that retrying
 * cannot help (a webhook answered 4xx other than 408/429, a message the broker refuses by its content): the
 * message is dead-lettered at once instead of after `maxAttempts`. Any other error a publisher throws is
 * treated as transient.
 */
export class PublishError extends OutboxError {
  override readonly name: string = 'PublishError';
  constructor(
    message: string,
    /** True when a retry cannot succeed. */
    readonly permanent: boolean,
    options?: { cause?: unknown },
  ) {
    super('outbox-publish-failed', message, options);
  }
}

/** The broker did not confirm within the relay's `publishTimeoutMs`; the attempt counts as failed. */
export class PublishTimeoutError extends OutboxError {
  override readonly name = 'PublishTimeoutError';
  constructor(readonly timeoutMs: number) {
    super('outbox-publish-timeout', `The broker did not confirm the message within ${timeoutMs} ms.`);
  }
}
