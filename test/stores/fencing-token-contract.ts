/**
 * The fencing-token part of the store contract ({@link storeContract} registers it for every store). A
 * store either hands out no fencing token at all (memory, Redis, DynamoDB: `claim.fencingToken` is always
 * absent) or one on every won claim: a decimal integer, kept by the owner's claim again, by `renew` and by
 * `checkpoint`, and larger for every later claim of the same key — a takeover, a claim after a release, after
 * the retention ended, after a reap.
 */
import { describe, expect, it } from 'vitest';
import type { ManualClock } from '../../src/core/clock.js';
import type { Claim } from '../../src/core/record.js';
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../../src/core/store.js';

const LEASE_MS = 10_000;
const RETENTION_MS = 60_000;
const RESPONSE = { status: 200, headers: {}, body: new Uint8Array([1]) };

function won(result: ClaimResult): Claim {
  if (!result.acquired) throw new Error(`expected the claim to be acquired, got the record ${JSON.stringify(result.record)}`);
  return result.claim;
}

/** The token as a number to compare, after checking it is a decimal integer. */
function tokenOf(claim: Claim): bigint {
  expect(claim.fencingToken).toMatch(/^\d{1,19}$/);
  return BigInt(claim.fencingToken as string);
}

/** Registers the fencing-token tests inside the store contract's describe, on its fixture's store and clock. */
export function fencingTokenContract(context: () => { store: IdempotencyStore; clock: ManualClock }): void {
  const input = (key: string, overrides: Partial<ClaimInput> = {}): ClaimInput => ({
    scope: 'tenant-1',
    key,
    fingerprint: 'a'.repeat(64),
    leaseMs: LEASE_MS,
    retentionMs: RETENTION_MS,
    ...overrides,
  });

  describe('fencing token (optional)', () => {
    it('is larger for every later claim of a key: takeover, release, retention over, reap; the owner keeps it', async () => {
      const { store, clock } = context();
      const first = won(await store.claim(input('k1', { leaseToken: 'owner-1' })));
      const takeover = async (): Promise<Claim> => {
        clock.advance(LEASE_MS);
        return won(await store.claim(input('k1')));
      };
      if (first.fencingToken === undefined) {
        // A store without fencing tokens hands out none, on any kind of claim.
        expect((await takeover()).fencingToken).toBeUndefined();
        return;
      }
      const tokens = [tokenOf(first)];
      expect(won(await store.claim(input('k1', { leaseToken: 'owner-1' }))).fencingToken).toBe(first.fencingToken);
      expect((await store.renew(first, LEASE_MS))?.fencingToken).toBe(first.fencingToken);
      const point = await store.checkpoint?.(first, 'phase-1', LEASE_MS);
      if (point !== undefined) expect(point.fencingToken).toBe(first.fencingToken);

      const second = await takeover();
      expect(second.takeover).toBe(true);
      tokens.push(tokenOf(second));
      expect(await store.release(second)).toBe(true);
      const third = won(await store.claim(input('k1')));
      tokens.push(tokenOf(third));
      expect(await store.complete(third, RESPONSE, 1_000)).toBe(true);
      clock.advance(1_000);
      // Retention over: the key is new again, for another fingerprint too.
      const fourth = won(await store.claim(input('k1', { fingerprint: 'b'.repeat(64) })));
      tokens.push(tokenOf(fourth));
      expect(await store.complete(fourth, RESPONSE, 1_000)).toBe(true);
      clock.advance(1_000);
      expect(await store.reap(10)).toBeGreaterThanOrEqual(1);
      expect(await store.get('tenant-1', 'k1')).toBeUndefined();
      const fifth = won(await store.claim(input('k1')));
      tokens.push(tokenOf(fifth));
      for (let at = 1; at < tokens.length; at++) expect(tokens[at]).toBeGreaterThan(tokens[at - 1] as bigint);
    });

    it('gives the one winner of parallel takeovers a larger token, and parallel claims of distinct keys distinct tokens', async () => {
      const { store, clock } = context();
      const first = won(await store.claim(input('hot')));
      clock.advance(LEASE_MS);
      const results = await Promise.all(Array.from({ length: 10 }, () => store.claim(input('hot'))));
      const winners = results.filter((result) => result.acquired).map(won);
      expect(winners).toHaveLength(1);
      const distinct = (await Promise.all(Array.from({ length: 20 }, (_, i) => store.claim(input(`key-${i}`))))).map(won);
      if (first.fencingToken === undefined) {
        expect([...winners, ...distinct].every((claim) => claim.fencingToken === undefined)).toBe(true);
        return;
      }
      expect(tokenOf(winners[0] as Claim)).toBeGreaterThan(tokenOf(first));
      expect(new Set(distinct.map((claim) => tokenOf(claim))).size).toBe(20);
    });

    it('hands a token to every claim of a batch (claimMany), larger than an earlier claim of the key', async () => {
      const { store, clock } = context();
      if (store.claimMany === undefined) return;
      const first = won(await store.claim(input('b0')));
      clock.advance(LEASE_MS);
      const batch = (await store.claimMany([input('b0'), input('b1'), input('b2')])).map(won);
      if (first.fencingToken === undefined) {
        expect(batch.every((claim) => claim.fencingToken === undefined)).toBe(true);
        return;
      }
      expect(batch[0]?.takeover).toBe(true);
      expect(tokenOf(batch[0] as Claim)).toBeGreaterThan(tokenOf(first));
      expect(new Set(batch.map((claim) => tokenOf(claim))).size).toBe(3);
    });
  });
}
