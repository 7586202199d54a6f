/**
 * The default owner token of a claim (its lease token, the fencing token its writes are checked against).
 *
 * @module
 */
import { randomFillSync } from 'node:crypto';

/** Tokens' worth of random bytes drawn at a time, as `crypto.randomUUID` caches its entropy. */
const BATCH_BYTES = 16 * 128;
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1');
/** Where each of the 16 bytes' two hex digits go in `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
const DIGIT_AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

const entropy = Buffer.allocUnsafe(BATCH_BYTES);
let used = BATCH_BYTES;
const text = Buffer.alloc(36, '-', 'latin1');

// Hot path: docs/hot-path.md#lease-token
/**
 * A random UUID (version 4, RFC 9562 section 5.4), as `crypto.randomUUID()` makes one, from the same kind of
 * cached CSPRNG bytes. The difference is the string: `crypto.randomUUID()` (Node.js 20) returns a rope of
 * about twenty concatenated pieces, which a store that keeps its records in the heap (the memory store) would
 * keep for the whole retention, and the garbage collector would copy piece by piece; this returns one flat
 * string.
 *
 * @returns 36 characters: lower-case hex digits and four `-`
 */
export function randomLeaseToken(): string {
  if (used === BATCH_BYTES) {
    randomFillSync(entropy);
    used = 0;
  }
  for (let i = 0; i < 16; i++) {
    let byte = entropy[used + i] as number;
    // The version (4) and the variant (10xx) bits, RFC 9562 section 5.4.
    if (i === 6) byte = (byte & 0x0f) | 0x40;
    else if (i === 8) byte = (byte & 0x3f) | 0x80;
    const at = DIGIT_AT[i] as number;
    text[at] = HEX_DIGITS[byte >> 4] as number;
    text[at + 1] = HEX_DIGITS[byte & 0x0f] as number;
  }
  used += 16;
  return text.toString('latin1');
}
