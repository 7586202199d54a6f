/**
 * Parsing of the `Idempotency-Key` request header.
 *
 * The IETF draft (draft-ietf-httpapi-idempotency-key-header, section 2.1) defines the field as an RFC 9651
 * Item whose value is a String. An Item may carry parameters (RFC 9651 section 3.1.2): `"abc";v=1` is the
 * String `abc` with the parameter `v=1`. The draft defines no parameter, so they are parsed (and must be
 * well formed) but ignored: `"abc";v=1` and `"abc"` are the same key.
 *
 * Many real clients (Stripe's SDKs among them) send the key bare, unquoted. That spelling is accepted as
 * a fallback with one rule: a bare key is 1 to 255 printable ASCII characters without space, `"`, `\`,
 * `,` or `;`. In RFC 9651, `,` separates the members of a List and `;` starts parameters, so `a,b` (two
 * keys) and `abc;v=1` (a key with a parameter, or a literal key holding `;`) are ambiguous; they are
 * refused with a reason that names the rule, never guessed at. A key that holds `,` or `;` is sent as an
 * sf-string: `"abc;v=1"` is the key `abc;v=1`.
 *
 * The decoded key is 1 to 255 characters and case-sensitive.
 *
 * @module
 */
import { IdempotencyKeyInvalidError } from './errors.js';

/** Longest key accepted, in characters (after sf-string decoding). */
export const MAX_KEY_LENGTH = 255;

const BARE_SEPARATOR_RULE =
  'a bare key may not contain "," or ";" (RFC 9651 separates list members with "," and starts parameters with ";"); send such a key as an sf-string, e.g. "a;b"';

/**
 * Decodes an Idempotency-Key header value: an RFC 9651 Item whose bare item is a String (section 4.2.3,
 * parameters parsed and ignored), or a bare key (printable ASCII without space, `"`, `\`, `,`, `;`).
 *
 * @param raw - the header value as received; surrounding spaces and tabs are ignored
 * @returns the key (1..255 printable ASCII characters)
 * @throws {@link IdempotencyKeyInvalidError} when the value is empty, too long, has a character outside
 *   printable ASCII, is a malformed sf-string or parameter, holds more than one Item (a List), or is a
 *   bare key containing `,` or `;`
 */
export function parseIdempotencyKey(raw: string): string {
  const value = isPadded(raw) ? raw.replace(/^[ \t]+|[ \t]+$/g, '') : raw;
  if (value.length === 0) throw new IdempotencyKeyInvalidError('it is empty');
  const key = value.charCodeAt(0) === 0x22 ? decodeStringItem(value) : decodeBareKey(value);
  if (key.length === 0) throw new IdempotencyKeyInvalidError('it is empty');
  return key;
}

// Keys rarely carry surrounding whitespace; checking both ends spares the regex on every request.
function isPadded(raw: string): boolean {
  const first = raw.charCodeAt(0);
  const last = raw.charCodeAt(raw.length - 1);
  return first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09;
}

function tooLong(): IdempotencyKeyInvalidError {
  return new IdempotencyKeyInvalidError(`it is longer than ${MAX_KEY_LENGTH} characters`);
}

function decodeBareKey(value: string): string {
  // Bail out before scanning a huge header character by character.
  if (value.length > MAX_KEY_LENGTH) throw tooLong();
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      throw new IdempotencyKeyInvalidError('a bare key may hold only printable ASCII without spaces');
    }
    if (c === 0x22 || c === 0x5c) {
      throw new IdempotencyKeyInvalidError('quotes and backslashes are allowed only inside an sf-string');
    }
    if (c === 0x2c || c === 0x3b) throw new IdempotencyKeyInvalidError(BARE_SEPARATOR_RULE);
  }
  return value;
}

// RFC 9651 section 4.2 with an Item: the String, its parameters, then nothing (trailing spaces are gone).
function decodeStringItem(value: string): string {
  const { text, end } = scanString(value, 0, MAX_KEY_LENGTH);
  const rest = skipParameters(value, end);
  if (rest === value.length) return text;
  if (value.charCodeAt(rest) === 0x2c) {
    throw new IdempotencyKeyInvalidError('it is a list; the header holds exactly one key (one RFC 9651 Item)');
  }
  throw new IdempotencyKeyInvalidError('only parameters (";name=value") may follow the sf-string');
}

// RFC 9651 section 4.2.5: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE, unescaped = %x20-21 / %x23-5B / %x5D-7E.
// Stops as soon as the decoded text exceeds `limit`, so a huge value costs no more than a long key.
// Hot path: docs/hot-path.md#key-parsing
// The text is taken as runs of unescaped characters sliced out of `value`, not built a character at a time:
// that would make a rope of one piece per character, which a store keeping the key in the heap would keep.
function scanString(value: string, start: number, limit: number): { text: string; end: number } {
  let text = '';
  let run = start + 1;
  for (let i = start + 1; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x5c) {
      const next = value.charCodeAt(i + 1);
      if (next !== 0x22 && next !== 0x5c) {
        throw new IdempotencyKeyInvalidError('an sf-string may escape only a quote or a backslash');
      }
      text += value.slice(run, i);
      run = ++i;
    } else if (c === 0x22) {
      return { text: text + value.slice(run, i), end: i + 1 };
    } else if (c < 0x20 || c > 0x7e) {
      throw new IdempotencyKeyInvalidError('an sf-string may hold only printable ASCII');
    }
    if (text.length + (i + 1 - run) > limit) throw tooLong();
  }
  throw new IdempotencyKeyInvalidError('the sf-string has no closing quote');
}

function badParameter(detail: string): IdempotencyKeyInvalidError {
  return new IdempotencyKeyInvalidError(`its parameters are not valid RFC 9651 parameters: ${detail}`);
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const isLcAlpha = (c: number): boolean => c >= 0x61 && c <= 0x7a;
const isAlpha = (c: number): boolean => isLcAlpha(c) || (c >= 0x41 && c <= 0x5a);
// RFC 9110 tchar, plus ":" and "/" which RFC 9651 section 3.3.4 allows in a Token after its first character.
const TOKEN_PUNCTUATION = new Set(Array.from("!#$%&'*+-.^_`|~:/", (ch) => ch.charCodeAt(0)));
const BASE64 = /^[A-Za-z0-9+/=]*$/;

// RFC 9651 section 4.2.3.2: *( ";" *SP key [ "=" bare-item ] ). Returns the index after the last parameter.
function skipParameters(value: string, start: number): number {
  let i = start;
  while (value.charCodeAt(i) === 0x3b) {
    i++;
    while (value.charCodeAt(i) === 0x20) i++;
    i = skipKey(value, i);
    if (value.charCodeAt(i) === 0x3d) i = skipBareItem(value, i + 1);
  }
  return i;
}

// RFC 9651 section 4.2.3.3: ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
function skipKey(value: string, start: number): number {
  const first = value.charCodeAt(start);
  if (!isLcAlpha(first) && first !== 0x2a) throw badParameter('a name starts with a lowercase letter or "*"');
  let i = start + 1;
  for (; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (!isLcAlpha(c) && !isDigit(c) && c !== 0x5f && c !== 0x2d && c !== 0x2e && c !== 0x2a) break;
  }
  return i;
}

// RFC 9651 section 4.2.3.1: Integer, Decimal, String, Token, Byte Sequence, Boolean, Date or Display String.
function skipBareItem(value: string, start: number): number {
  const c = value.charCodeAt(start);
  if (c === 0x2d || isDigit(c)) return skipNumber(value, start, true);
  if (c === 0x22) return scanString(value, start, Number.POSITIVE_INFINITY).end;
  if (isAlpha(c) || c === 0x2a) {
    let i = start + 1;
    while (i < value.length && (isAlpha(value.charCodeAt(i)) || isDigit(value.charCodeAt(i)) || TOKEN_PUNCTUATION.has(value.charCodeAt(i)))) i++;
    return i;
  }
  if (c === 0x3a) {
    const close = value.indexOf(':', start + 1);
    if (close < 0 || !BASE64.test(value.slice(start + 1, close))) throw badParameter('a byte sequence is base64 between colons');
    return close + 1;
  }
  if (c === 0x3f) {
    const b = value.charCodeAt(start + 1);
    if (b !== 0x30 && b !== 0x31) throw badParameter('a boolean is ?0 or ?1');
    return start + 2;
  }
  if (c === 0x40) return skipNumber(value, start + 1, false);
  if (c === 0x25) return skipDisplayString(value, start);
  throw badParameter('a value after "=" must be an RFC 9651 bare item');
}

// RFC 9651 section 4.2.4: an Integer has at most 15 digits; a Decimal at most 12 before the point and 1 to 3 after.
function skipNumber(value: string, start: number, decimalAllowed: boolean): number {
  let i = value.charCodeAt(start) === 0x2d ? start + 1 : start;
  if (!isDigit(value.charCodeAt(i))) throw badParameter('a number starts with a digit');
  const digitsStart = i;
  let point = -1;
  for (; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (isDigit(c)) continue;
    if (c === 0x2e && point < 0) {
      if (!decimalAllowed) throw badParameter('a date is an integer number of seconds');
      if (i - digitsStart > 12) throw badParameter('a decimal has at most 12 integer digits');
      point = i;
      continue;
    }
    break;
  }
  if (point < 0 && i - digitsStart > 15) throw badParameter('an integer has at most 15 digits');
  if (point >= 0 && (i - point - 1 < 1 || i - point - 1 > 3)) throw badParameter('a decimal has 1 to 3 fractional digits');
  return i;
}

// RFC 9651 section 4.2.10: %" then printable ASCII or %xx (lowercase hex) bytes, DQUOTE; the bytes are UTF-8.
function skipDisplayString(value: string, start: number): number {
  if (value.charCodeAt(start + 1) !== 0x22) throw badParameter('a display string starts with %"');
  const bytes: number[] = [];
  for (let i = start + 2; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) throw badParameter('a display string holds printable ASCII and %xx escapes');
    if (c === 0x22) {
      try {
        new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(bytes));
      } catch {
        throw badParameter('a display string decodes to UTF-8');
      }
      return i + 1;
    }
    if (c === 0x25) {
      const hex = value.slice(i + 1, i + 3);
      if (!/^[0-9a-f]{2}$/.test(hex)) throw badParameter('a display string escapes a byte as % and two lowercase hex digits');
      bytes.push(Number.parseInt(hex, 16));
      i += 2;
    } else {
      bytes.push(c);
    }
  }
  throw badParameter('the display string has no closing quote');
}
