/**
 * Parsing of the `Idempotency-Key` request header.
 *
 * The IETF draft (draft-ietf-httpapi-idempotency-key-header, section 2.1) defines the field as an RFC 9651
 * Item whose value is a String (`"abc-123"`). Many real clients (Stripe's SDKs among them) send a bare
 * token instead, so both are accepted: a quoted sf-string, or a bare run of printable ASCII without spaces.
 * The decoded key is 1 to 255 characters and case-sensitive.
 *
 * @module
 */
import { IdempotencyKeyInvalidError } from './errors.js';

/** Longest key accepted, in characters (after sf-string decoding). */
export const MAX_KEY_LENGTH = 255;

/**
 * Decodes an Idempotency-Key header value.
 *
 * @param raw - the header value as received; surrounding spaces and tabs are ignored
 * @returns the key (1..255 printable ASCII characters)
 * @throws {@link IdempotencyKeyInvalidError} when the value is empty, too long, has a character outside
 *   printable ASCII, is a malformed sf-string, or carries sf parameters
 */
export function parseIdempotencyKey(raw: string): string {
  const value = isPadded(raw) ? raw.replace(/^[ \t]+|[ \t]+$/g, '') : raw;
  if (value.length === 0) throw new IdempotencyKeyInvalidError('it is empty');
  const key = value.startsWith('"') ? decodeSfString(value) : decodeBareToken(value);
  if (key.length === 0) throw new IdempotencyKeyInvalidError('it is empty');
  if (key.length > MAX_KEY_LENGTH) {
    throw new IdempotencyKeyInvalidError(`it is longer than ${MAX_KEY_LENGTH} characters`);
  }
  return key;
}

// Keys rarely carry surrounding whitespace; checking both ends spares the regex on every request.
function isPadded(raw: string): boolean {
  const first = raw.charCodeAt(0);
  const last = raw.charCodeAt(raw.length - 1);
  return first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09;
}

function decodeBareToken(value: string): string {
  // Bail out before scanning a huge header character by character.
  if (value.length > MAX_KEY_LENGTH) {
    throw new IdempotencyKeyInvalidError(`it is longer than ${MAX_KEY_LENGTH} characters`);
  }
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      throw new IdempotencyKeyInvalidError('a bare key may hold only printable ASCII without spaces');
    }
    if (c === 0x22 || c === 0x5c) {
      throw new IdempotencyKeyInvalidError('quotes and backslashes are allowed only inside an sf-string');
    }
  }
  return value;
}

// RFC 9651 section 4.2.5: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE, unescaped = %x20-21 / %x23-5B / %x5D-7E
function decodeSfString(value: string): string {
  if (value.length > MAX_KEY_LENGTH * 2 + 2) {
    throw new IdempotencyKeyInvalidError(`it is longer than ${MAX_KEY_LENGTH} characters`);
  }
  let out = '';
  for (let i = 1; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x5c) {
      const next = value.charCodeAt(++i);
      if (next !== 0x22 && next !== 0x5c) {
        throw new IdempotencyKeyInvalidError('an sf-string may escape only a quote or a backslash');
      }
      out += String.fromCharCode(next);
    } else if (c === 0x22) {
      if (i !== value.length - 1) {
        throw new IdempotencyKeyInvalidError('parameters and trailing characters after the sf-string are not allowed');
      }
      return out;
    } else if (c < 0x20 || c > 0x7e) {
      throw new IdempotencyKeyInvalidError('an sf-string may hold only printable ASCII');
    } else {
      out += value[i];
    }
  }
  throw new IdempotencyKeyInvalidError('the sf-string has no closing quote');
}
