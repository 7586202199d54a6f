/** The phase runner's option checks, plan validation and derived keys. */
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { definePhases } from '../../src/phases/plan.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { FP } from './fixtures/ride-fakes.js';

describe('createPhaseRunner, definePhases and derivedKey', () => {
  it('refuses a store without checkpoint, naming the store', () => {
    class LegacyStore {
      claim = (): never => {
        throw new Error('unused');
      };
    }
    expect(() => createPhaseRunner({ store: new LegacyStore() as unknown as IdempotencyStore })).toThrow(
      /option "store" \(LegacyStore\) has no checkpoint\(\)/,
    );
    expect(() => createPhaseRunner({ store: createMemoryStore(), transactional: true } as never)).toThrow(/no transaction\(\)/);
    expect(() => createPhaseRunner({ store: createMemoryStore(), leaseMs: 0 })).toThrow(/"leaseMs"/);
    expect(() => createPhaseRunner({ store: createMemoryStore(), maxCompensationAttempts: 0 })).toThrow(/"maxCompensationAttempts"/);
  });

  it('validates plans, naming the option', () => {
    const run = () => Promise.resolve(undefined);
    expect(() => definePhases({ id: '', phases: [{ name: 'a', run }] })).toThrow(/"id"/);
    expect(() => definePhases({ id: 'p', phases: [] })).toThrow(/"phases"/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run }, { name: 'a', run }] })).toThrow(/"phases\[1\]\.name" repeats/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run: 1 as never }] })).toThrow(/"phases\[0\]\.run"/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run, compensate: 'undo' as never }] })).toThrow(/"phases\[0\]\.compensate"/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run }], compensated: 402 as never })).toThrow(/"compensated"/);
  });

  it('derives a stable 64-hex key per (scope, key, fingerprint, step)', () => {
    const id = { scope: 's', key: 'k', fingerprint: FP };
    const key = derivedKey(id, 'charge');
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(derivedKey({ ...id }, 'charge')).toBe(key);
    const others = [
      derivedKey(id, 'refund'),
      derivedKey({ ...id, scope: 't' }, 'charge'),
      derivedKey({ ...id, key: 'k2' }, 'charge'),
      derivedKey({ ...id, fingerprint: 'e'.repeat(64) }, 'charge'),
      derivedKey({ ...id, scope: 's:k', key: '' }, 'charge'),
    ];
    expect(new Set([key, ...others]).size).toBe(6);
  });
});
