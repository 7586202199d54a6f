import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IdempotencyKeyInvalidError } from '../../src/core/errors.js';
import { MAX_KEY_LENGTH, parseIdempotencyKey } from '../../src/core/key.js';

function invalid(raw: string): IdempotencyKeyInvalidError {
  try {
    parseIdempotencyKey(raw);
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyKeyInvalidError);
    const invalidError = error as IdempotencyKeyInvalidError;
    expect(invalidError.code).toBe('idempotency-key-invalid');
    expect(invalidError.name).toBe('IdempotencyKeyInvalidError');
    return invalidError;
  }
  throw new Error(`expected ${JSON.stringify(raw)} to be rejected`);
}

describe('parseIdempotencyKey', () => {
  it('accepts a bare token of printable ASCII, case preserved', () => {
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(parseIdempotencyKey('AbC_123:~!#$%&*+.^`|')).toBe('AbC_123:~!#$%&*+.^`|');
    expect(parseIdempotencyKey('ABC')).not.toBe(parseIdempotencyKey('abc'));
  });

  it('accepts an RFC 9651 sf-string and decodes its escapes', () => {
    expect(parseIdempotencyKey('"8e03978e-40d5"')).toBe('8e03978e-40d5');
    expect(parseIdempotencyKey('"a b"')).toBe('a b');
    expect(parseIdempotencyKey('"say \\"hi\\" \\\\ bye"')).toBe('say "hi" \\ bye');
  });

  it('decodes every sf-string of printable ASCII back to its text, and refuses a text over the limit', () => {
    const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: MAX_KEY_LENGTH + 5 });
    fc.assert(
      fc.property(printable, (text) => {
        const encoded = `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
        if (text.length > MAX_KEY_LENGTH) expect(invalid(encoded).reason).toMatch(/longer than/);
        else expect(parseIdempotencyKey(encoded)).toBe(text);
      }),
      { numRuns: 500 },
    );
  });

  it('ignores surrounding spaces and tabs', () => {
    expect(parseIdempotencyKey(' \tkey-1\t ')).toBe('key-1');
    expect(parseIdempotencyKey('  "key 1"  ')).toBe('key 1');
  });

  it('rejects an empty value, a blank value and an empty sf-string', () => {
    expect(invalid('').reason).toMatch(/empty/);
    expect(invalid(' \t ').reason).toMatch(/empty/);
    expect(invalid('""').reason).toMatch(/empty/);
  });

  it('accepts 255 characters and rejects 256, bare or quoted, counted after decoding', () => {
    expect(MAX_KEY_LENGTH).toBe(255);
    expect(parseIdempotencyKey('k'.repeat(255))).toHaveLength(255);
    expect(invalid('k'.repeat(256)).reason).toMatch(/255/);
    expect(parseIdempotencyKey(`"${'k'.repeat(255)}"`)).toHaveLength(255);
    expect(invalid(`"${'k'.repeat(256)}"`).reason).toMatch(/255/);
    expect(parseIdempotencyKey(`"${'\\"'.repeat(255)}"`)).toBe('"'.repeat(255));
    expect(invalid(`"${'\\"'.repeat(256)}"`).reason).toMatch(/255/);
    expect(invalid(`"${'k'.repeat(100_000)}"`).reason).toMatch(/255/);
  });

  it('rejects characters outside printable ASCII', () => {
    invalid('ключ');
    invalid('"ключ"');
    invalid('caf\u00e9');
    invalid('"caf\u00e9"');
    invalid('a\u0001b');
    invalid('"a\tb"');
    invalid('"a\u007fb"');
  });

  it('rejects spaces, quotes and backslashes in a bare token', () => {
    expect(invalid('a b').reason).toMatch(/without spaces/);
    invalid('a"b');
    invalid('a\\b');
  });

  it('rejects trailing characters, bad escapes and a missing closing quote', () => {
    expect(invalid('"abc" ;a=1').reason).toMatch(/only parameters/);
    invalid('"abc"x');
    invalid('"a"b"');
    expect(invalid('"a\\nb"').reason).toMatch(/escape/);
    invalid('"abc\\"');
    expect(invalid('"abc').reason).toMatch(/closing quote/);
    invalid('"');
  });

  // RFC 9651 section 3.1.2: an Item may carry parameters; the draft defines none, so they are ignored.
  it('accepts an sf-string with parameters of every RFC 9651 bare item type and ignores them', () => {
    expect(parseIdempotencyKey('"abc";v=1')).toBe('abc');
    expect(parseIdempotencyKey('"abc"; v=1;flag')).toBe('abc');
    expect(
      parseIdempotencyKey('"abc";i=-42;d=3.141;s="x;y,z \\"q\\"";t=tok/a:b*;b=:aGVsbG8=:;t1=?1;f=?0;at=@1700000000;ds=%"caf%c3%a9";*k=*;a.b_c-d=1'),
    ).toBe('abc');
    expect(parseIdempotencyKey('"a;b,c";v=1')).toBe('a;b,c');
  });

  it('refuses malformed parameters after an sf-string, naming RFC 9651', () => {
    for (const raw of [
      '"abc";',
      '"abc";V=1',
      '"abc";1v=1',
      '"abc";=1',
      '"abc";v=',
      '"abc";v=1.2345',
      '"abc";v=1.',
      '"abc";v=1234567890123.5',
      '"abc";v=1234567890123456',
      '"abc";v=-',
      '"abc";v=?2',
      '"abc";v=:a b:',
      '"abc";v=:abc',
      '"abc";v=@1.5',
      '"abc";v="open',
      '"abc";v=%"%C3%A9"',
      '"abc";v=%"%ff"',
      '"abc";v=%"x',
      '"abc";v=%x',
      '"abc";v=(1 2)',
    ]) {
      expect(invalid(raw).reason, raw).toMatch(/RFC 9651|closing quote/);
    }
  });

  it('refuses a list: the header holds one Item', () => {
    expect(invalid('"a","b"').reason).toMatch(/list/);
    expect(invalid('"a", "b"').reason).toMatch(/list/);
    expect(invalid('"a";v=1,"b"').reason).toMatch(/list/);
  });

  it('refuses "," and ";" in a bare key, naming the rule, and accepts them quoted', () => {
    for (const raw of ['a,b', 'abc;v=1', 'abc;', ';abc', 'a, b']) {
      expect(invalid(raw).reason, raw).toMatch(/a bare key may not contain "," or ";"|without spaces/);
    }
    expect(invalid('abc;v=1').reason).toMatch(/send such a key as an sf-string/);
    expect(parseIdempotencyKey('"abc;v=1"')).toBe('abc;v=1');
    expect(parseIdempotencyKey('"a,b"')).toBe('a,b');
  });

  it('reads "abc", "abc";v=1 and abc as the same key', () => {
    expect(new Set(['"abc"', '"abc";v=1', 'abc', ' "abc";v=2 '].map(parseIdempotencyKey))).toEqual(new Set(['abc']));
  });
});
