/**
 * The checks of message ids and consumer names shared by the inbox's single and batch paths.
 *
 * @module
 */
import { describe } from '../../core/validate.js';
import { MAX_MESSAGE_ID_LENGTH, MessageIdMissingError } from './errors.js';

/**
 * The delivery's message id.
 * @throws MessageIdMissingError when it is absent, empty, over 255 characters or contains NUL
 */
export function requireMessageId(messageId: unknown): string {
  const reason =
    typeof messageId !== 'string'
      ? 'no id'
      : messageId.length === 0
        ? 'an empty id'
        : messageId.length > MAX_MESSAGE_ID_LENGTH
          ? `an id longer than ${MAX_MESSAGE_ID_LENGTH} characters`
          : messageId.includes('\0')
            ? 'an id containing NUL'
            : undefined;
  if (reason !== undefined) throw new MessageIdMissingError(reason);
  return messageId as string;
}

/**
 * `value` when it is a non-empty string of at most 255 characters without NUL.
 * @throws TypeError naming `option` and the value otherwise
 */
export function requireName(option: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_MESSAGE_ID_LENGTH || value.includes('\0')) {
    throw new TypeError(`retrysafe: "${option}" must be a non-empty string of at most ${MAX_MESSAGE_ID_LENGTH} characters without NUL, got ${describe(value)}`);
  }
  return value;
}
