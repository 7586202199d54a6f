import { describe, expect, it } from 'vitest';
import { randomLeaseToken } from '../../src/core/lease-token.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('randomLeaseToken', () => {
  it('makes random version-4 UUIDs, none repeated, across several refills of its entropy', () => {
    const tokens = Array.from({ length: 5_000 }, () => randomLeaseToken());
    for (const token of tokens) expect(token).toMatch(UUID_V4);
    expect(new Set(tokens).size).toBe(tokens.length);
  });

  it('hands out strings that later tokens do not change', () => {
    const first = randomLeaseToken();
    const copy = [...first].join('');
    for (let i = 0; i < 300; i++) randomLeaseToken();
    expect(first).toBe(copy);
  });

  it('spreads its hex digits: every digit appears in every random position over many tokens', () => {
    const seen = Array.from({ length: 36 }, () => new Set<string>());
    for (let i = 0; i < 2_000; i++) [...randomLeaseToken()].forEach((c, at) => seen[at]?.add(c));
    for (const at of [0, 5, 10, 20, 35]) expect(seen[at]?.size).toBe(16);
    expect(seen[14]).toEqual(new Set(['4']));
    expect([...(seen[19] ?? [])].sort()).toEqual(['8', '9', 'a', 'b']);
  });
});
