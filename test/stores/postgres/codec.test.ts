import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeHexToken, decodeToken, encodeToken } from '../../../src/stores/postgres/codec.js';

describe('PostgreSQL token codec', () => {
  it('decodes the hex text of an encoded token as decodeToken decodes its bytes, in each of the three forms', () => {
    const tokens = [randomUUID(), 'ab'.repeat(32), 'owner-1', 'ÄÖ token', '', 'ABCD', '0123-not-a-uuid'];
    for (const token of tokens) {
      const bytes = encodeToken(token);
      expect(decodeToken(bytes)).toBe(token);
      expect(decodeHexToken(bytes.toString('hex'))).toBe(token);
    }
    expect(encodeToken(tokens[0]!)[0]).toBe(2);
    expect(encodeToken(tokens[1]!)[0]).toBe(1);
    expect(encodeToken(tokens[2]!)[0]).toBe(0);
  });

  it('round-trips any string through its hex text', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.uuid().map((uuid) => uuid.toLowerCase()), fc.stringMatching(/^(?:[0-9a-f]{2})+$/)), (token) => {
        expect(decodeHexToken(encodeToken(token).toString('hex'))).toBe(token);
      }),
    );
  });

  it('refuses an unknown tag, as decodeToken does', () => {
    expect(() => decodeHexToken('07abcd')).toThrow(/unknown token encoding tag "07"/);
    expect(() => decodeToken(Buffer.from('07abcd', 'hex'))).toThrow(/unknown token encoding tag 7/);
  });
});
