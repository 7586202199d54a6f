import { describe, expect, it } from 'vitest';
import { MIN_PAYMENTS, planFaults, type CrashFault, type Fault } from '../../../src/demo/harness/plan.js';

const BOTH: readonly CrashFault[] = ['crash-mid-handler', 'crash-after-commit'];
const count = (plan: ReturnType<typeof planFaults>, fault: Fault): number => plan.filter((p) => p.fault === fault).length;

describe('planFaults', () => {
  it('is a pure function of the seed', () => {
    const a = planFaults({ seed: 42, payments: 240, keyPrefix: 'pay-a', crashes: BOTH });
    const b = planFaults({ seed: 42, payments: 240, keyPrefix: 'pay-a', crashes: BOTH });
    const c = planFaults({ seed: 43, payments: 240, keyPrefix: 'pay-a', crashes: BOTH });
    expect(b).toEqual(a);
    expect(c.map((p) => p.fault)).not.toEqual(a.map((p) => p.fault));
  });

  it('gives every payment its own key under the prefix, and a valid amount and currency', () => {
    const plan = planFaults({ seed: 1, payments: 240, keyPrefix: 'pay-x', crashes: BOTH });
    expect(plan).toHaveLength(240);
    expect(new Set(plan.map((p) => p.key)).size).toBe(240);
    expect(plan[0]?.key).toBe('pay-x-000');
    expect(plan[239]?.key).toBe('pay-x-239');
    for (const payment of plan) {
      expect(Number.isSafeInteger(payment.amountCents) && payment.amountCents > 0).toBe(true);
      expect(payment.currency).toMatch(/^[A-Z]{3}$/);
      if (payment.fault === 'burst') {
        expect(payment.copies).toBeGreaterThanOrEqual(3);
        expect(payment.copies).toBeLessThanOrEqual(5);
      } else {
        expect(payment.copies).toBe(1);
      }
    }
  });

  it.each([0, 1, 2, 99, 12345, 0xffffffff])('with seed %i holds every fault kind, one crash of each kind mid-run', (seed) => {
    for (const payments of [MIN_PAYMENTS, 60, 240]) {
      const plan = planFaults({ seed, payments, keyPrefix: 'k', crashes: BOTH });
      expect(count(plan, 'lost-reply')).toBeGreaterThanOrEqual(1);
      expect(count(plan, 'slow')).toBeGreaterThanOrEqual(1);
      expect(count(plan, 'burst')).toBeGreaterThanOrEqual(1);
      expect(count(plan, 'crash-mid-handler')).toBe(1);
      expect(count(plan, 'crash-after-commit')).toBe(1);
      const mid = plan.findIndex((p) => p.fault === 'crash-mid-handler');
      const after = plan.findIndex((p) => p.fault === 'crash-after-commit');
      const quarter = Math.floor(payments / 4);
      expect(mid).toBeGreaterThanOrEqual(quarter);
      expect(mid).toBeLessThan(2 * quarter);
      expect(after).toBeGreaterThanOrEqual(2 * quarter);
      expect(after).toBeLessThan(3 * quarter);
    }
  });

  it('plans no crash when the store would not survive one', () => {
    const plan = planFaults({ seed: 5, payments: 240, keyPrefix: 'k', crashes: [] });
    expect(count(plan, 'crash-mid-handler') + count(plan, 'crash-after-commit')).toBe(0);
    expect(count(plan, 'lost-reply')).toBeGreaterThan(0);
  });

  it('plans only the crash after the record is saved for a plain store, and the same other faults as with both', () => {
    const both = planFaults({ seed: 9, payments: 60, keyPrefix: 'k', crashes: BOTH });
    const plain = planFaults({ seed: 9, payments: 60, keyPrefix: 'k', crashes: ['crash-after-commit'] });
    expect(count(plain, 'crash-mid-handler')).toBe(0);
    expect(plain.findIndex((p) => p.fault === 'crash-after-commit')).toBe(both.findIndex((p) => p.fault === 'crash-after-commit'));
    const midHandler = both.findIndex((p) => p.fault === 'crash-mid-handler');
    expect(plain.filter((_, i) => i !== midHandler)).toEqual(both.filter((_, i) => i !== midHandler));
  });

  it.each([
    [{ payments: MIN_PAYMENTS - 1 }, 'option "payments" must be an integer >= 10, got 9'],
    [{ payments: 10.5 }, 'option "payments" must be an integer >= 10, got 10.5'],
    [{ seed: -1 }, 'option "seed" must be an integer in [0, 4294967295], got -1'],
    [{ seed: 2 ** 32 }, 'option "seed" must be an integer in [0, 4294967295], got 4294967296'],
    [{ crashes: ['crash-mid-handler', 'slow'] as never }, 'option "crashes" must be an array of "crash-mid-handler" and "crash-after-commit", got ["crash-mid-handler","slow"]'],
  ])('throws a TypeError naming the option for %j', (override, message) => {
    expect(() => planFaults({ seed: 1, payments: 20, keyPrefix: 'k', crashes: BOTH, ...override })).toThrow(new TypeError(`retrysafe: ${message}`));
  });
});
