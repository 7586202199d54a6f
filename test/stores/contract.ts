/**
 * The shared store contract. Every store calls {@link storeContract} once from its
 * own test file; a store is correct when it passes this suite unchanged.
 *
 * All TTL and lease behaviour is driven by the injected {@link ManualClock}; expectations are relative to
 * `clock.now()` so a store that passes the clock's time into its queries passes as well as one that owns
 * the clock object. Only `waitFor` uses small real timeouts (at most 200 ms).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ManualClock } from '../../src/core/clock.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../src/core/record.js';
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../../src/core/store.js';
import { fencingTokenContract } from './fencing-token-contract.js';

/** What a store's test file hands the contract for each test: a fresh, empty store on a manual clock. */
export interface ContractFixture {
  readonly store: IdempotencyStore;
  readonly clock: ManualClock;
  close(): Promise<void>;
}

const LEASE_MS = 10_000;
const RETENTION_MS = 60_000;
const COMPLETED_RETENTION_MS = 120_000;
const FP_A = 'a'.repeat(64);
const FP_B = 'b'.repeat(64);

/** Every byte value, so a store that treats the body as text (NUL, invalid UTF-8) fails. */
const BINARY_BODY = Uint8Array.from({ length: 512 }, (_, i) => (i < 256 ? i : 255 - (i - 256)));

const RESPONSE: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/octet-stream', etag: '"v1"', location: '/payments/42' },
  body: BINARY_BODY,
};

function acquired(result: ClaimResult): Claim {
  if (!result.acquired) throw new Error(`expected the claim to be acquired, got the record ${JSON.stringify(result.record)}`);
  return result.claim;
}

function refused(result: ClaimResult): IdempotencyRecord {
  if (result.acquired) throw new Error(`expected the claim to be refused, got the claim ${JSON.stringify(result.claim)}`);
  return result.record;
}

function present(record: IdempotencyRecord | undefined): IdempotencyRecord {
  if (!record) throw new Error('expected a record, got undefined');
  return record;
}

function bytes(body: Uint8Array | undefined): number[] {
  return Array.from(body ?? []);
}

/**
 * Registers `describe(\`store contract: ${name}\`)`. `setup` runs before every test and must return an
 * empty store whose time comes from the returned clock; `close` runs after every test.
 */
export function storeContract(name: string, setup: () => Promise<ContractFixture>): void {
  describe(`store contract: ${name}`, () => {
    let fixture: ContractFixture;
    let store: IdempotencyStore;
    let clock: ManualClock;

    beforeEach(async () => {
      fixture = await setup();
      store = fixture.store;
      clock = fixture.clock;
    });

    afterEach(async () => {
      await fixture.close();
    });

    function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
      return { scope: 'tenant-1', key, fingerprint: FP_A, leaseMs: LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
    }

    describe('claim', () => {
      it('inserts an in_progress record and hands the caller a fresh lease', async () => {
        const now = clock.now();
        const claim = acquired(await store.claim(input('k1')));
        expect(claim.takeover).toBe(false);
        expect(typeof claim.leaseToken).toBe('string');
        expect(claim.leaseToken.length).toBeGreaterThan(0);
        expect(claim).toMatchObject({ scope: 'tenant-1', key: 'k1', fingerprint: FP_A, leaseExpiresAt: now + LEASE_MS });
        expect(claim.recoveryPoint).toBeUndefined();

        const record = present(await store.get('tenant-1', 'k1'));
        expect(record).toMatchObject({
          scope: 'tenant-1',
          key: 'k1',
          fingerprint: FP_A,
          state: 'in_progress',
          leaseToken: claim.leaseToken,
          leaseExpiresAt: now + LEASE_MS,
          createdAt: now,
          expiresAt: now + RETENTION_MS,
        });
        expect(record.response).toBeUndefined();
        expect(record.completedAt).toBeUndefined();
      });

      it('returns the existing in_progress record unchanged to a second claim', async () => {
        const claim = acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        clock.advance(LEASE_MS - 1);
        const second = refused(await store.claim(input('k1')));
        expect(second).toEqual(before);
        expect(second.leaseToken).toBe(claim.leaseToken);
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
      });

      it('recognises its owner: a claim presenting the standing lease token again is acquired, its lease unchanged', async () => {
        const first = acquired(await store.claim(input('k1', { leaseToken: 'owner-1' })));
        expect(first.leaseToken).toBe('owner-1');
        clock.advance(1);
        // The same claim sent again after its reply was lost.
        const again = acquired(await store.claim(input('k1', { leaseToken: 'owner-1' })));
        expect(again).toEqual(first);
        refused(await store.claim(input('k1', { leaseToken: 'owner-2' })));
        refused(await store.claim(input('k1', { leaseToken: 'owner-1', fingerprint: FP_B })));
        refused(await store.claim(input('k1')));
        expect(await store.complete(again, RESPONSE, COMPLETED_RETENTION_MS)).toBe(true);
        // Completed: the owner's token no longer claims it; the record is replayed.
        expect(refused(await store.claim(input('k1', { leaseToken: 'owner-1' }))).state).toBe('completed');
      });

      it('hands out a distinct fencing token per acquired claim', async () => {
        const first = acquired(await store.claim(input('k1')));
        const second = acquired(await store.claim(input('k2')));
        expect(first.leaseToken).not.toBe(second.leaseToken);
      });
    });

    describe('complete', () => {
      it('saves the response byte for byte and starts the completed retention', async () => {
        const claim = acquired(await store.claim(input('k1')));
        clock.advance(1_234);
        const completedAt = clock.now();
        expect(await store.complete(claim, RESPONSE, COMPLETED_RETENTION_MS)).toBe(true);

        const record = present(await store.get('tenant-1', 'k1'));
        expect(record.state).toBe('completed');
        expect(record.completedAt).toBe(completedAt);
        expect(record.expiresAt).toBe(completedAt + COMPLETED_RETENTION_MS);
        expect(record.createdAt).toBe(completedAt - 1_234);
        expect(record.fingerprint).toBe(FP_A);
        expect(record.response?.status).toBe(201);
        expect(record.response?.headers).toEqual(RESPONSE.headers);
        expect(record.response?.body).toBeInstanceOf(Uint8Array);
        expect(record.response?.body.byteLength).toBe(BINARY_BODY.byteLength);
        expect(bytes(record.response?.body)).toEqual(bytes(BINARY_BODY));
      });

      it('round-trips an empty body and empty headers', async () => {
        const claim = acquired(await store.claim(input('k1')));
        expect(await store.complete(claim, { status: 204, headers: {}, body: new Uint8Array() }, RETENTION_MS)).toBe(true);
        const record = present(await store.get('tenant-1', 'k1'));
        expect(record.response?.status).toBe(204);
        expect(record.response?.headers).toEqual({});
        expect(record.response?.body.byteLength).toBe(0);
      });

      it('returns the completed record to a later claim', async () => {
        const claim = acquired(await store.claim(input('k1')));
        await store.complete(claim, RESPONSE, COMPLETED_RETENTION_MS);
        const stored = present(await store.get('tenant-1', 'k1'));
        clock.advance(LEASE_MS * 2);
        const record = refused(await store.claim(input('k1')));
        expect(record.state).toBe('completed');
        expect(bytes(record.response?.body)).toEqual(bytes(BINARY_BODY));
        expect(record).toEqual(stored);
        // A completed record is replayed even to another fingerprint's claim (the engine then reports a mismatch).
        expect(refused(await store.claim(input('k1', { fingerprint: FP_B })))).toEqual(stored);
      });

      it('cannot complete a record twice: its own token is answered true, and nothing changes', async () => {
        const claim = acquired(await store.claim(input('k1')));
        expect(await store.complete(claim, RESPONSE, RETENTION_MS)).toBe(true);
        const stored = present(await store.get('tenant-1', 'k1'));
        clock.advance(10);
        expect(await store.complete(claim, { status: 500, headers: {}, body: new Uint8Array([1]) }, RETENTION_MS)).toBe(true);
        expect(await store.release(claim)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toEqual(stored);
      });

      it('answers a completion run again by its own token true, so a completion whose reply was lost can be retried', async () => {
        const claim = acquired(await store.claim(input('k1')));
        expect(await store.complete(claim, RESPONSE, COMPLETED_RETENTION_MS)).toBe(true);
        const stored = present(await store.get('tenant-1', 'k1'));
        clock.advance(1_000);
        expect(await store.complete(claim, RESPONSE, COMPLETED_RETENTION_MS)).toBe(true);
        expect(await store.get('tenant-1', 'k1')).toEqual(stored);
        expect(bytes((await store.get('tenant-1', 'k1'))?.response?.body)).toEqual(bytes(BINARY_BODY));
      });

      it('still refuses the completion of a second token once the record is completed', async () => {
        const first = acquired(await store.claim(input('k1')));
        clock.advance(LEASE_MS);
        const second = acquired(await store.claim(input('k1')));
        expect(await store.complete(second, RESPONSE, RETENTION_MS)).toBe(true);
        const stored = present(await store.get('tenant-1', 'k1'));
        expect(await store.complete(first, { status: 200, headers: {}, body: new Uint8Array([2]) }, RETENTION_MS)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toEqual(stored);
      });
    });

    describe('renew (lease keep-alive)', () => {
      it('extends the lease from now, keeping the token, and holds off a claim past the first lease end', async () => {
        const claim = acquired(await store.claim(input('k1')));
        clock.advance(LEASE_MS - 1_000);
        const now = clock.now();
        const renewed = await store.renew(claim, LEASE_MS);
        expect(renewed).toEqual({ ...claim, leaseExpiresAt: now + LEASE_MS });
        expect(present(await store.get('tenant-1', 'k1'))).toMatchObject({ state: 'in_progress', leaseToken: claim.leaseToken, leaseExpiresAt: now + LEASE_MS });
        clock.advance(LEASE_MS - 1);
        expect(refused(await store.claim(input('k1'))).state).toBe('in_progress');
        // The renewed claim (and the original one: the token is what fences) still completes.
        expect(await store.complete(renewed ?? claim, RESPONSE, RETENTION_MS)).toBe(true);
      });

      it('still ends the lease when renewals stop, so the next claim takes over', async () => {
        const claim = acquired(await store.claim(input('k1')));
        clock.advance(5_000);
        await store.renew(claim, LEASE_MS);
        clock.advance(LEASE_MS);
        const second = acquired(await store.claim(input('k1')));
        expect(second.takeover).toBe(true);
      });

      it('stretches the retention to cover a lease that outlasts it, never shortening it', async () => {
        const claim = acquired(await store.claim(input('k1', { retentionMs: LEASE_MS })));
        clock.advance(LEASE_MS - 100);
        const now = clock.now();
        await store.renew(claim, LEASE_MS);
        expect(present(await store.get('tenant-1', 'k1')).expiresAt).toBe(now + LEASE_MS);
        const long = acquired(await store.claim(input('k2')));
        const before = present(await store.get('tenant-1', 'k2')).expiresAt;
        await store.renew(long, 1_000);
        expect(present(await store.get('tenant-1', 'k2')).expiresAt).toBe(before);
        // Reaping at the old retention end leaves the renewed record in place.
        clock.advance(200);
        await store.reap(100);
        expect(present(await store.get('tenant-1', 'k1')).state).toBe('in_progress');
      });

      it('keeps the recovery point of a multi-phase record', async () => {
        if (!store.checkpoint) return;
        const claim = acquired(await store.claim(input('k1')));
        const checkpointed = await store.checkpoint(claim, 'charged', LEASE_MS);
        clock.advance(1_000);
        expect((await store.renew(checkpointed ?? claim, LEASE_MS))?.leaseExpiresAt).toBe(clock.now() + LEASE_MS);
        expect(present(await store.get('tenant-1', 'k1')).recoveryPoint).toBe('charged');
        clock.advance(LEASE_MS);
        expect(acquired(await store.claim(input('k1'))).recoveryPoint).toBe('charged');
      });

      it('is fenced off after a takeover and leaves the winner untouched', async () => {
        const first = acquired(await store.claim(input('k1')));
        clock.advance(LEASE_MS);
        const second = acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        expect(await store.renew(first, LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
        expect(await store.renew(second, LEASE_MS)).toBeDefined();
      });

      it('is fenced off on a completed, released or absent record', async () => {
        const done = acquired(await store.claim(input('done')));
        await store.complete(done, RESPONSE, RETENTION_MS);
        const stored = present(await store.get('tenant-1', 'done'));
        expect(await store.renew(done, LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'done')).toEqual(stored);
        const gone = acquired(await store.claim(input('gone')));
        await store.release(gone);
        expect(await store.renew(gone, LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'gone')).toBeUndefined();
        const stale: Claim = { ...acquired(await store.claim(input('other'))), leaseToken: 'not-the-token' };
        expect(await store.renew(stale, LEASE_MS)).toBeUndefined();
      });

      it('rejects a lease that is not a positive integer with a TypeError', async () => {
        const claim = acquired(await store.claim(input('k1')));
        await expect(store.renew(claim, 0)).rejects.toThrow(TypeError);
        await expect(store.renew(claim, 1.5)).rejects.toThrow(TypeError);
      });
    });

    describe('release', () => {
      it('deletes the record so that a new claim wins', async () => {
        const claim = acquired(await store.claim(input('k1')));
        expect(await store.release(claim)).toBe(true);
        expect(await store.get('tenant-1', 'k1')).toBeUndefined();
        const again = acquired(await store.claim(input('k1', { fingerprint: FP_B })));
        expect(again.takeover).toBe(false);
        expect(again.leaseToken).not.toBe(claim.leaseToken);
        expect(present(await store.get('tenant-1', 'k1')).fingerprint).toBe(FP_B);
      });
    });

    describe('fencing', () => {
      it('refuses complete and release with a stale token and leaves the record unchanged', async () => {
        const claim = acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        const stale: Claim = { ...claim, leaseToken: `${claim.leaseToken}-stale` };
        expect(await store.complete(stale, RESPONSE, RETENTION_MS)).toBe(false);
        expect(await store.release(stale)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
      });

      it('refuses a holder whose key was released and claimed again', async () => {
        const first = acquired(await store.claim(input('k1')));
        await store.release(first);
        const second = acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        expect(await store.complete(first, RESPONSE, RETENTION_MS)).toBe(false);
        expect(await store.release(first)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
        expect(await store.complete(second, RESPONSE, RETENTION_MS)).toBe(true);
      });

      it('refuses complete and release on an absent record', async () => {
        const claim = acquired(await store.claim(input('k1')));
        await store.release(claim);
        expect(await store.complete(claim, RESPONSE, RETENTION_MS)).toBe(false);
        expect(await store.release(claim)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toBeUndefined();
      });
    });

    fencingTokenContract(() => ({ store, clock }));

    describe('lease takeover', () => {
      it('keeps the lease live until leaseExpiresAt, then lets the same fingerprint take over', async () => {
        const start = clock.now();
        const first = acquired(await store.claim(input('k1')));
        clock.advance(LEASE_MS - 1);
        expect(refused(await store.claim(input('k1'))).leaseToken).toBe(first.leaseToken);

        clock.advance(1);
        const now = clock.now();
        const second = acquired(await store.claim(input('k1')));
        expect(second.takeover).toBe(true);
        expect(second.leaseToken).not.toBe(first.leaseToken);
        expect(second.leaseExpiresAt).toBe(now + LEASE_MS);

        const record = present(await store.get('tenant-1', 'k1'));
        expect(record).toMatchObject({
          state: 'in_progress',
          fingerprint: FP_A,
          leaseToken: second.leaseToken,
          leaseExpiresAt: now + LEASE_MS,
          createdAt: start,
        });

        // The crashed holder comes back late: fenced off.
        expect(await store.complete(first, RESPONSE, RETENTION_MS)).toBe(false);
        expect(await store.release(first)).toBe(false);
        expect(await store.get('tenant-1', 'k1')).toEqual(record);

        expect(await store.complete(second, RESPONSE, RETENTION_MS)).toBe(true);
        expect(present(await store.get('tenant-1', 'k1')).state).toBe('completed');
      });

      it('does not let another fingerprint take over an expired lease', async () => {
        acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        clock.advance(LEASE_MS + 1);
        expect(refused(await store.claim(input('k1', { fingerprint: FP_B })))).toEqual(before);
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
      });

      it('lets exactly one of many parallel claims take over an expired lease', async () => {
        acquired(await store.claim(input('k1')));
        clock.advance(LEASE_MS);
        const results = await Promise.all(Array.from({ length: 20 }, () => store.claim(input('k1'))));
        const winners = results.filter((r) => r.acquired);
        expect(winners).toHaveLength(1);
        expect(acquired(winners[0] as ClaimResult).takeover).toBe(true);
      });
    });

    describe('retention', () => {
      it('makes a completed key new again, for any fingerprint, once its retention expired', async () => {
        const claim = acquired(await store.claim(input('k1')));
        await store.complete(claim, RESPONSE, COMPLETED_RETENTION_MS);
        clock.advance(COMPLETED_RETENTION_MS - 1);
        expect(refused(await store.claim(input('k1', { fingerprint: FP_B }))).state).toBe('completed');

        clock.advance(1);
        const now = clock.now();
        const fresh = acquired(await store.claim(input('k1', { fingerprint: FP_B })));
        expect(fresh.takeover).toBe(false);
        expect(fresh.leaseToken).not.toBe(claim.leaseToken);
        const record = present(await store.get('tenant-1', 'k1'));
        expect(record).toMatchObject({
          state: 'in_progress',
          fingerprint: FP_B,
          leaseToken: fresh.leaseToken,
          createdAt: now,
          expiresAt: now + RETENTION_MS,
        });
        expect(record.response).toBeUndefined();
        expect(record.completedAt).toBeUndefined();
        expect(await store.complete(claim, RESPONSE, RETENTION_MS)).toBe(false);
      });

      it('makes an abandoned in_progress key new again once its retention expired', async () => {
        acquired(await store.claim(input('k1', { leaseMs: 1_000, retentionMs: 5_000 })));
        clock.advance(5_000);
        const fresh = acquired(await store.claim(input('k1', { fingerprint: FP_B })));
        expect(fresh.takeover).toBe(false);
        expect(present(await store.get('tenant-1', 'k1')).fingerprint).toBe(FP_B);
      });
    });

    describe('concurrency', () => {
      it('gives exactly one of 50 parallel claims of one key the lease', async () => {
        const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(input('hot'))));
        const winners = results.filter((r) => r.acquired);
        expect(winners).toHaveLength(1);
        const token = acquired(winners[0] as ClaimResult).leaseToken;
        for (const result of results) {
          if (!result.acquired) expect(result.record.leaseToken).toBe(token);
        }
        expect(present(await store.get('tenant-1', 'hot')).leaseToken).toBe(token);
      });

      it('acquires all of 50 parallel claims of distinct keys', async () => {
        const keys = Array.from({ length: 50 }, (_, i) => `key-${i}`);
        const results = await Promise.all(keys.map((key) => store.claim(input(key))));
        expect(results.every((r) => r.acquired)).toBe(true);
        const tokens = new Set(results.map((r) => acquired(r).leaseToken));
        expect(tokens.size).toBe(50);
        const records = await Promise.all(keys.map((key) => store.get('tenant-1', key)));
        expect(records.every((r) => r?.state === 'in_progress')).toBe(true);
      });
    });

    describe('reap', () => {
      it('deletes only expired records, at most limit per call, and reports how many', async () => {
        for (let i = 0; i < 5; i++) {
          const claim = acquired(await store.claim(input(`old-${i}`)));
          await store.complete(claim, RESPONSE, 1_000);
        }
        acquired(await store.claim(input('abandoned', { leaseMs: 1_000, retentionMs: 1_000 })));
        // A lease longer than the retention: expired by retention, but still held; it must survive.
        acquired(await store.claim(input('held', { leaseMs: 100_000, retentionMs: 1_000 })));
        const live = acquired(await store.claim(input('live', { retentionMs: 1_000_000 })));
        await store.complete(live, RESPONSE, 1_000_000);
        acquired(await store.claim(input('running', { leaseMs: 100_000, retentionMs: 1_000_000 })));

        expect(await store.reap(100)).toBe(0);
        clock.advance(1_000);

        const counts = [await store.reap(2), await store.reap(2), await store.reap(2), await store.reap(2)];
        expect(counts).toEqual([2, 2, 2, 0]);
        for (let i = 0; i < 5; i++) expect(await store.get('tenant-1', `old-${i}`)).toBeUndefined();
        expect(await store.get('tenant-1', 'abandoned')).toBeUndefined();
        expect(present(await store.get('tenant-1', 'held')).state).toBe('in_progress');
        expect(present(await store.get('tenant-1', 'live')).state).toBe('completed');
        expect(present(await store.get('tenant-1', 'running')).state).toBe('in_progress');
      });
    });

    describe('checkpoint (optional)', () => {
      function checkpointer(): NonNullable<IdempotencyStore['checkpoint']> {
        return (claim, recoveryPoint, leaseMs) => {
          if (!store.checkpoint) throw new Error('unreachable: guarded by the caller');
          return store.checkpoint(claim, recoveryPoint, leaseMs);
        };
      }

      it('records the recovery point, keeps the token and renews the lease', async () => {
        if (!store.checkpoint) return;
        const claim = acquired(await store.claim(input('k1')));
        clock.advance(3_000);
        const now = clock.now();
        const renewed = await checkpointer()(claim, 'charged', 20_000);
        expect(renewed).toEqual({ ...claim, leaseExpiresAt: now + 20_000, recoveryPoint: 'charged' });
        const record = present(await store.get('tenant-1', 'k1'));
        expect(record).toMatchObject({
          state: 'in_progress',
          leaseToken: claim.leaseToken,
          leaseExpiresAt: now + 20_000,
          recoveryPoint: 'charged',
        });
        // The renewed lease holds past the original one.
        clock.advance(LEASE_MS);
        expect(refused(await store.claim(input('k1'))).recoveryPoint).toBe('charged');
        // The same token completes; the record keeps its recovery point.
        expect(await store.complete(renewed as Claim, RESPONSE, RETENTION_MS)).toBe(true);
        expect(present(await store.get('tenant-1', 'k1'))).toMatchObject({ state: 'completed', recoveryPoint: 'charged' });
      });

      it('hands the recovery point to the claim that takes over an expired lease', async () => {
        if (!store.checkpoint) return;
        const first = acquired(await store.claim(input('k1')));
        await checkpointer()(first, 'ride-created', LEASE_MS);
        await checkpointer()(first, '{"point":"charged","data":[1,2]}', LEASE_MS);
        clock.advance(LEASE_MS);
        const second = acquired(await store.claim(input('k1')));
        expect(second.takeover).toBe(true);
        expect(second.recoveryPoint).toBe('{"point":"charged","data":[1,2]}');
      });

      it('fences off a stale holder after a takeover and leaves the record unchanged', async () => {
        if (!store.checkpoint) return;
        const first = acquired(await store.claim(input('k1')));
        await checkpointer()(first, 'one', LEASE_MS);
        clock.advance(LEASE_MS);
        const second = acquired(await store.claim(input('k1')));
        const before = present(await store.get('tenant-1', 'k1'));
        expect(await checkpointer()(first, 'two', LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'k1')).toEqual(before);
        expect((await checkpointer()(second, 'two', LEASE_MS))?.recoveryPoint).toBe('two');
      });

      it('refuses a checkpoint on a completed, released or absent record', async () => {
        if (!store.checkpoint) return;
        const done = acquired(await store.claim(input('done')));
        await store.complete(done, RESPONSE, RETENTION_MS);
        const stored = present(await store.get('tenant-1', 'done'));
        expect(await checkpointer()(done, 'late', LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'done')).toEqual(stored);
        const gone = acquired(await store.claim(input('gone')));
        await store.release(gone);
        expect(await checkpointer()(gone, 'late', LEASE_MS)).toBeUndefined();
        expect(await store.get('tenant-1', 'gone')).toBeUndefined();
      });

      it('ends the lease at once with leaseMs 0, so the next claim takes over and resumes', async () => {
        if (!store.checkpoint) return;
        const first = acquired(await store.claim(input('k1')));
        await checkpointer()(first, 'phase-1', 0);
        const second = acquired(await store.claim(input('k1')));
        expect(second).toMatchObject({ takeover: true, recoveryPoint: 'phase-1' });
        await expect(checkpointer()(second, 'phase-2', -1)).rejects.toThrow(TypeError);
      });

      it('stretches the retention to cover a renewed lease', async () => {
        if (!store.checkpoint) return;
        const claim = acquired(await store.claim(input('k1', { leaseMs: 1_000, retentionMs: 5_000 })));
        const now = clock.now();
        await checkpointer()(claim, 'p', 8_000);
        expect(present(await store.get('tenant-1', 'k1')).expiresAt).toBe(now + 8_000);
        await checkpointer()(claim, 'p', 1_000);
        expect(present(await store.get('tenant-1', 'k1')).expiresAt).toBe(now + 8_000);
      });

      it('drops the recovery point when the retention expired and the key is new again', async () => {
        if (!store.checkpoint) return;
        const claim = acquired(await store.claim(input('k1', { leaseMs: 1_000, retentionMs: 5_000 })));
        await checkpointer()(claim, 'p', 1_000);
        clock.advance(5_000);
        const fresh = acquired(await store.claim(input('k1')));
        expect(fresh.takeover).toBe(false);
        expect(fresh.recoveryPoint).toBeUndefined();
        expect(present(await store.get('tenant-1', 'k1')).recoveryPoint).toBeUndefined();
      });
    });

    describe('listAbandoned (optional)', () => {
      it('lists in_progress records with a recovery point and an expired lease, oldest first, at most limit', async () => {
        if (!store.checkpoint || !store.listAbandoned) return;
        const listAbandoned = (limit: number) => store.listAbandoned?.(limit) ?? Promise.resolve([]);
        const mark = (claim: Claim, leaseMs: number) => store.checkpoint?.(claim, 'p', leaseMs);
        await mark(acquired(await store.claim(input('late'))), 3_000);
        await mark(acquired(await store.claim(input('early'))), 1_000);
        await mark(acquired(await store.claim(input('middle'))), 2_000);
        await mark(acquired(await store.claim(input('live'))), 100_000);
        acquired(await store.claim(input('no-point', { leaseMs: 1_000 })));
        const done = acquired(await store.claim(input('done')));
        await mark(done, 1_000);
        await store.complete(done, RESPONSE, RETENTION_MS);
        const stale = acquired(await store.claim(input('retention-over', { leaseMs: 1_000, retentionMs: 2_000 })));
        await mark(stale, 1_000);

        expect(await listAbandoned(10)).toEqual([]);
        clock.advance(3_000);
        const all = await listAbandoned(10);
        expect(all.map((r) => r.key)).toEqual(['early', 'middle', 'late']);
        expect(all[0]).toMatchObject({ scope: 'tenant-1', state: 'in_progress', recoveryPoint: 'p', fingerprint: FP_A });
        expect((await listAbandoned(2)).map((r) => r.key)).toEqual(['early', 'middle']);
        await expect(listAbandoned(0)).rejects.toThrow(TypeError);
      });
    });

    describe('get, scopes and keys', () => {
      it('returns undefined for an absent key', async () => {
        expect(await store.get('tenant-1', 'nothing-here')).toBeUndefined();
      });

      it('keeps the same key in two scopes as two records', async () => {
        const a = acquired(await store.claim(input('shared', { scope: 'tenant-a' })));
        const b = acquired(await store.claim(input('shared', { scope: 'tenant-b', fingerprint: FP_B })));
        expect(a.leaseToken).not.toBe(b.leaseToken);
        await store.complete(a, RESPONSE, RETENTION_MS);
        expect(present(await store.get('tenant-a', 'shared')).state).toBe('completed');
        expect(present(await store.get('tenant-b', 'shared'))).toMatchObject({ state: 'in_progress', fingerprint: FP_B });
        expect(await store.release(b)).toBe(true);
        expect(present(await store.get('tenant-a', 'shared')).state).toBe('completed');
        expect(await store.get('tenant-b', 'shared')).toBeUndefined();
        // The scope/key split is not a plain concatenation, with or without a separator.
        expect(await store.get('tenant-ashared', '')).toBeUndefined();
        acquired(await store.claim(input('b:c', { scope: 'a' })));
        acquired(await store.claim(input('c', { scope: 'a:b' })));
        expect(present(await store.get('a', 'b:c')).key).toBe('b:c');
        expect(present(await store.get('a:b', 'c')).key).toBe('c');
      });

      it('round-trips unicode, quotes, separators and 255-character keys exactly', async () => {
        const keys = [
          'ключ-🔑-鍵',
          `it's "quoted" \\ back\`tick`,
          'a:b/c|d',
          'x'.repeat(255),
          'CaseSensitive',
          'casesensitive',
        ];
        const scope = `scope "ü" ';--`;
        for (const key of keys) acquired(await store.claim(input(key, { scope })));
        for (const key of keys) {
          const record = present(await store.get(scope, key));
          expect(record.key).toBe(key);
          expect(record.scope).toBe(scope);
        }
        expect(await store.get(scope, 'x'.repeat(254))).toBeUndefined();
      });
    });

    describe('waitFor', () => {
      it('resolves with the completed record when another call completes', async () => {
        if (!store.waitFor) return;
        const claim = acquired(await store.claim(input('k1')));
        const waiting = store.waitFor('tenant-1', 'k1', 5_000);
        const started = performance.now();
        setTimeout(() => void store.complete(claim, RESPONSE, RETENTION_MS), 20);
        const record = present(await waiting);
        expect(performance.now() - started).toBeLessThan(2_000);
        expect(record.state).toBe('completed');
        expect(bytes(record.response?.body)).toEqual(bytes(BINARY_BODY));
      });

      it('resolves undefined when the holder releases', async () => {
        if (!store.waitFor) return;
        const claim = acquired(await store.claim(input('k1')));
        const waiting = store.waitFor('tenant-1', 'k1', 5_000);
        setTimeout(() => void store.release(claim), 20);
        expect(await waiting).toBeUndefined();
      });

      it('resolves with the in_progress record after its timeout', async () => {
        if (!store.waitFor) return;
        const claim = acquired(await store.claim(input('k1')));
        const started = performance.now();
        const record = present(await store.waitFor('tenant-1', 'k1', 150));
        expect(performance.now() - started).toBeGreaterThanOrEqual(140);
        expect(record).toMatchObject({ state: 'in_progress', leaseToken: claim.leaseToken });
      });

      it('resolves at once for a completed or absent key', async () => {
        if (!store.waitFor) return;
        expect(await store.waitFor('tenant-1', 'absent', 200)).toBeUndefined();
        const claim = acquired(await store.claim(input('k1')));
        await store.complete(claim, RESPONSE, RETENTION_MS);
        const started = performance.now();
        // "At once": well before the 5 s timeout, with room for a slow, busy machine.
        expect(present(await store.waitFor('tenant-1', 'k1', 5_000)).state).toBe('completed');
        expect(performance.now() - started).toBeLessThan(2_500);
      });
    });
  });
}
