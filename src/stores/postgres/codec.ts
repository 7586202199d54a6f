/**
 * Compact byte encodings of fingerprints and fencing tokens, to keep a stored record small.
 *
 * A hex SHA-256 fingerprint is 64 characters as text but 32 bytes raw; a `randomUUID()` token is 36
 * characters but 16 bytes. Any other string is kept as UTF-8. A one-byte tag tells the three forms apart,
 * so the encoding is injective: equal strings give equal bytes and different strings different bytes,
 * which lets the SQL compare encoded values directly.
 *
 * @module
 */

const TAG_TEXT = 0;
const TAG_HEX = 1;
const TAG_UUID = 2;

const LOWER_HEX = /^(?:[0-9a-f]{2})+$/;
const LOWER_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Encodes a fingerprint or lease token for a `bytea` column. */
export function encodeToken(value: string): Buffer {
  if (LOWER_UUID.test(value)) return tagged(TAG_UUID, value.replaceAll('-', ''), 'hex');
  if (LOWER_HEX.test(value)) return tagged(TAG_HEX, value, 'hex');
  return tagged(TAG_TEXT, value, 'utf8');
}

/** `tag`, then `text` in `encoding`, in one buffer written in place. */
function tagged(tag: number, text: string, encoding: 'hex' | 'utf8'): Buffer {
  const bytes = Buffer.allocUnsafe(1 + Buffer.byteLength(text, encoding));
  bytes[0] = tag;
  bytes.write(text, 1, encoding);
  return bytes;
}

/**
 * Decodes what {@link encodeToken} produced.
 *
 * @throws Error when the bytes carry an unknown tag (the column was written by something else)
 */
export function decodeToken(bytes: Buffer): string {
  const tag = bytes[0];
  const rest = bytes.subarray(1);
  switch (tag) {
    case TAG_TEXT:
      return rest.toString('utf8');
    case TAG_HEX:
      return rest.toString('hex');
    case TAG_UUID:
      return dashed(rest.toString('hex'));
    default:
      throw new Error(`retrysafe: unknown token encoding tag ${String(tag)} in the records table`);
  }
}

/**
 * Decodes what {@link encodeToken} produced, given as hex text (SQL `encode(column, 'hex')`, as the claim
 * returns a standing record's tokens), without turning the text into bytes and back: the tag is the first
 * two hex digits, and a hex or UUID token is the rest of the text as it is.
 *
 * @throws Error when the text carries an unknown tag (the column was written by something else)
 */
export function decodeHexToken(hex: string): string {
  // The tags in hex: TAG_TEXT, TAG_HEX, TAG_UUID.
  switch (hex.slice(0, 2)) {
    case '00':
      return Buffer.from(hex.slice(2), 'hex').toString('utf8');
    case '01':
      return hex.slice(2);
    case '02':
      return dashed(hex.slice(2));
    default:
      throw new Error(`retrysafe: unknown token encoding tag ${JSON.stringify(hex.slice(0, 2))} in the records table`);
  }
}

/** A UUID's 32 hex digits in its canonical 8-4-4-4-12 form. */
function dashed(hex: string): string {
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
