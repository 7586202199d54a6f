import { describe, expect, it } from 'vitest';
import { canonicalQuery, fingerprint } from '../../src/core/fingerprint.js';

const base = { method: 'POST', route: '/payments', query: 'currency=eur', body: '{"amount":100}' };

describe('fingerprint', () => {
  it('is 64 lower-case hex characters and deterministic', () => {
    expect(fingerprint(base)).toMatch(/^[0-9a-f]{64}$/);
    expect(fingerprint({ ...base })).toBe(fingerprint(base));
  });

  it('keeps the fingerprints records were stored with (fixed vectors: text with non-ASCII and a lone surrogate, bytes)', () => {
    expect(fingerprint({ method: 'post', route: '/payments', query: 'b=2&a=1', body: '{"amount":100,"note":"café ✓"}' })).toBe(
      '0e6e3d390093c3b59268a69f358db806b5cb75ad927313b26a68a42fca2fd41b',
    );
    expect(fingerprint({ method: 'PATCH', route: '/pé', body: new Uint8Array([0, 1, 2, 255]) })).toBe(
      '9e362db8e0b3587ab14b12c1e32106fab640b2ce5410744129ac297c21b4cbe7',
    );
    expect(fingerprint({ method: 'POST', route: '/p', body: 'a\ud800b' })).toBe('599a2e467fcf260a0552546657624cd10f67a4c75e610b9d5b122564a13cfa7d');
  });

  it('compares the method case-insensitively', () => {
    expect(fingerprint({ ...base, method: 'post' })).toBe(fingerprint(base));
    expect(fingerprint({ ...base, method: 'PUT' })).not.toBe(fingerprint(base));
    expect(fingerprint({ ...base, method: 'pOsT' })).toBe(fingerprint(base));
    // Past ASCII the method is upper-cased as `toUpperCase` does it ('é' → 'É', 'ß' → 'SS').
    expect(fingerprint({ ...base, method: 'Xé' })).toBe(fingerprint({ ...base, method: 'XÉ' }));
    expect(fingerprint({ ...base, method: 'ß' })).toBe(fingerprint({ ...base, method: 'SS' }));
  });

  it('distinguishes routes, queries and bodies', () => {
    expect(fingerprint({ ...base, route: '/refunds' })).not.toBe(fingerprint(base));
    expect(fingerprint({ ...base, route: '/Payments' })).not.toBe(fingerprint(base));
    expect(fingerprint({ ...base, query: 'currency=usd' })).not.toBe(fingerprint(base));
    expect(fingerprint({ ...base, body: '{"amount":101}' })).not.toBe(fingerprint(base));
  });

  it('canonicalises the query: order, repeated names, encodings and a leading "?"', () => {
    const fp = (query: string) => fingerprint({ ...base, query });
    expect(fp('b=2&a=1')).toBe(fp('a=1&b=2'));
    expect(fp('?a=1&b=2')).toBe(fp('a=1&b=2'));
    expect(fp('a=2&a=1')).toBe(fp('a=1&a=2'));
    expect(fp('a=%41')).toBe(fp('a=A'));
    expect(fp('q=a+b')).toBe(fp('q=a%20b'));
    expect(fp('a=1&a=1')).not.toBe(fp('a=1'));
    expect(fp('a=1')).not.toBe(fp('a=2'));
    expect(fingerprint({ method: 'POST', route: '/x', query: '' })).toBe(fingerprint({ method: 'POST', route: '/x' }));
    expect(fingerprint({ method: 'POST', route: '/x', query: '?' })).toBe(fingerprint({ method: 'POST', route: '/x' }));
  });

  it('exposes the canonical query', () => {
    expect(canonicalQuery('b=2&a=1&a=0')).toBe('a=0&a=1&b=2');
    expect(canonicalQuery('?x=%7e')).toBe('x=%7E');
    expect(canonicalQuery('')).toBe('');
  });

  it('hashes a string body as its UTF-8 bytes, and an absent body as an empty one', () => {
    const text = '{"name":"Zoë 🧾"}';
    expect(fingerprint({ ...base, body: new TextEncoder().encode(text) })).toBe(fingerprint({ ...base, body: text }));
    const noBody = { method: 'POST', route: '/x' };
    expect(fingerprint({ ...noBody, body: '' })).toBe(fingerprint(noBody));
    expect(fingerprint({ ...noBody, body: new Uint8Array() })).toBe(fingerprint(noBody));
    expect(fingerprint({ ...noBody, body: new Uint8Array([0]) })).not.toBe(fingerprint(noBody));
  });

  it('hashes the exact body bytes', () => {
    const a = Uint8Array.from([0x00, 0xff, 0x10]);
    const b = Uint8Array.from([0x00, 0xff, 0x11]);
    expect(fingerprint({ ...base, body: a })).not.toBe(fingerprint({ ...base, body: b }));
    // Invalid UTF-8 is not normalised away.
    expect(fingerprint({ ...base, body: Uint8Array.from([0xc3]) })).not.toBe(fingerprint({ ...base, body: Uint8Array.from([0xc4]) }));
  });

  it('keeps field boundaries apart: no two field splits of the same text collide', () => {
    const all = [
      fingerprint({ method: 'POST', route: '/ab', query: '', body: '' }),
      fingerprint({ method: 'POST', route: '/a', query: '', body: 'b' }),
      fingerprint({ method: 'POS', route: 'T/ab', query: '', body: '' }),
      fingerprint({ method: 'POST', route: '/a', query: 'b=', body: '' }),
      fingerprint({ method: 'POST', route: '/a?b=', body: '' }),
      fingerprint({ method: 'POST', route: '/a', query: '', body: '1:b' }),
      fingerprint({ method: 'POST', route: '3:/a', body: '' }),
    ];
    expect(new Set(all).size).toBe(all.length);
  });
});
