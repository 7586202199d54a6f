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

  it('rejects sf parameters, trailing characters, bad escapes and a missing closing quote', () => {
    expect(invalid('"abc";expires=1').reason).toMatch(/parameters/);
    invalid('"abc" ;a=1');
    invalid('"abc"x');
    invalid('"a"b"');
    expect(invalid('"a\\nb"').reason).toMatch(/escape/);
    invalid('"abc\\"');
    expect(invalid('"abc').reason).toMatch(/closing quote/);
    invalid('"');
  });
});
