/**
 * The plain `SET … NX GET` claim on one Redis 7 (a private `redis-server`, counted by `INFO commandstats`):
 * concurrent duplicates of new keys get exactly one winner and one execution each with no claim script; a
 * resent `SET` of the caller's own claim answers the win it was; a standing record whose lease or
 * retention ends within the bound's lead of Redis's clock (so the bound proves nothing) is decided by the
 * claim script on Redis's `TIME`, as is a lease truly over.
 */
import type { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { createReceiver } from '../../../src/receiver.js';
import { setClaimOn } from '../../../src/stores/redis/claim.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { recordKey } from '../../../src/stores/redis/keys.js';
import { transportOf } from '../../../src/stores/redis/transport.js';
import { commandCalls, REDIS_DRIVERS, startPrivateRedis } from '../../support/redis-server.js';

const FP = 's'.repeat(64);
const OK: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
const LEASE_MS = 30_000;
const RETENTION_MS = 3_600_000;
const input = (key: string, leaseToken?: string) => ({ scope: 'sc', key, fingerprint: FP, leaseMs: LEASE_MS, retentionMs: RETENTION_MS, leaseToken });

/** Script calls since the last reset (`EVALSHA` and `EVAL`). */
async function scriptCalls(client: Redis): Promise<number> {
  const calls = await commandCalls(client);
  return (calls.evalsha ?? 0) + (calls.eval ?? 0);
}

/** Redis's clock, in ms since the epoch, floored as the scripts floor it. */
async function redisNow(client: Redis): Promise<number> {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

for (const driver of REDIS_DRIVERS) {
  const server = await startPrivateRedis([]);
  afterAll(() => server?.stop());
  /** The store's client: `admin` itself, or a node-redis client to the same server (`admin` counts and inspects). */
  const storeClient = async (admin: Redis) => (driver === 'ioredis' ? admin : await server!.connectNodeRedis());

  describe.runIf(server !== undefined)(`redis store (${driver}): the plain SET claim`, () => {
    it('runs each of 20 new keys once under 8 concurrent duplicates each, one winner per key, no claim script', async () => {
      const client = await server!.connect();
      const store = createRedisStore({ client: await storeClient(client), prefix: 'dups' });
      const receiver = createReceiver({ store, inFlight: 'reject' });
      // Warm up: the policy check and the bound of Redis's clock, and the completion's script loaded.
      await receiver.execute({ scope: 'sc', key: 'warm', fingerprint: FP }, () => Promise.resolve(OK));
      await client.config('RESETSTAT');
      const runs = new Map<string, number>();
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const outcomes = await Promise.all(
        keys.flatMap((key) =>
          Array.from({ length: 8 }, () =>
            receiver
              .execute({ scope: 'sc', key, fingerprint: FP }, async () => {
                runs.set(key, (runs.get(key) ?? 0) + 1);
                await new Promise((resolve) => setTimeout(resolve, 20));
                return OK;
              })
              .then(
                (outcome) => (outcome.replayed ? 'replayed' : 'executed'),
                (error: Error) => error.name,
              ),
          ),
        ),
      );
      expect(keys.map((key) => runs.get(key))).toEqual(keys.map(() => 1));
      expect(outcomes.filter((o) => o === 'executed')).toHaveLength(keys.length);
      expect(outcomes.every((o) => o === 'executed' || o === 'replayed' || o === 'RequestInProgressError')).toBe(true);
      // One SET per claim, one completion script (and its own SET) per key: no claim ran a script.
      const calls = await commandCalls(client);
      expect({ evalsha: calls.evalsha, eval: calls.eval, set: calls.set }).toEqual({ evalsha: keys.length, eval: undefined, set: keys.length * 8 + keys.length });
      for (const key of keys) expect(await store.get('sc', key)).toMatchObject({ state: 'completed', response: { status: 201 } });
      await store.close();
    });

    it('answers its own SET sent again (ioredis resending it after a dropped connection) as the win it was, with no script', async () => {
      const client = await server!.connect();
      const store = createRedisStore({ client: await storeClient(client), prefix: 'resent' });
      await store.ping();
      await client.config('RESETSTAT');
      const first = await store.claim(input('k', 'token-1'));
      const resent = await store.claim(input('k', 'token-1'));
      expect(first).toMatchObject({ acquired: true, claim: { leaseToken: 'token-1', takeover: false } });
      expect(resent).toEqual(first);
      // Anyone else is refused the live lease.
      expect(await store.claim(input('k'))).toMatchObject({ acquired: false, record: { state: 'in_progress', leaseToken: 'token-1' } });
      expect(await scriptCalls(client)).toBe(0);
      if (!resent.acquired) throw new Error('the resent claim lost');
      expect(await store.complete(resent.claim, OK, RETENTION_MS)).toBe(true);
      await store.close();
    });

    it('writes a new record stamped with the bound it was given, never earlier than Redis’s clock', async () => {
      const client = await server!.connect();
      const before = await redisNow(client);
      const store = createRedisStore({ client: await storeClient(client), prefix: 'stamp' });
      const won = await store.claim(input('k'));
      const after = await redisNow(client);
      if (!won.acquired) throw new Error('the new key was not claimed');
      const record = await store.get('sc', 'k');
      expect(record?.leaseExpiresAt).toBe(won.claim.leaseExpiresAt);
      const created = record?.createdAt ?? 0;
      expect(created).toBeGreaterThanOrEqual(before);
      // The bound leads Redis's clock by about a round trip at most (a loaded host may stretch one).
      expect(created).toBeLessThan(after + 1_000);
      expect(record).toMatchObject({ leaseExpiresAt: created + LEASE_MS, expiresAt: created + RETENTION_MS, state: 'in_progress' });
      await store.close();
    });

    describe('a standing record the bound cannot decide: the claim script decides by Redis’s TIME', () => {
      /** A record planted by a store on a clock pinned at `at` (the claim script, writing those times). */
      async function plant(client: Redis, prefix: string, at: number, leaseMs: number, retentionMs: number) {
        const planter = createRedisStore({ client: await storeClient(client), prefix, clock: new ManualClock(at) });
        const planted = await planter.claim({ ...input('k', 'planted'), leaseMs, retentionMs });
        if (!planted.acquired) throw new Error('the record was not planted');
        return { planter, planted: planted.claim };
      }

      it('refuses a lease that is live by Redis’s clock but ends within the bound’s lead', async () => {
        const client = await server!.connect();
        const now = await redisNow(client);
        // Live for 5 s by Redis's clock; a bound 10 s ahead of it (a lead far past any round trip) sees it over.
        await plant(client, 'lead-lease', now, 5_000, RETENTION_MS);
        await client.config('RESETSTAT');
        const result = await setClaimOn(transportOf(await storeClient(client)), recordKey('lead-lease', 'sc', 'k'), input('k', 'late'), 'late', now + 10_000);
        expect(result).toMatchObject({ acquired: false, record: { state: 'in_progress', leaseToken: 'planted', leaseExpiresAt: now + 5_000 } });
        expect(await scriptCalls(client)).toBe(1);
      });

      it('replays a completed record whose retention is live by Redis’s clock but ends within the bound’s lead', async () => {
        const client = await server!.connect();
        const now = await redisNow(client);
        const { planter, planted } = await plant(client, 'lead-retention', now, 1_000, 5_000);
        expect(await planter.complete(planted, OK, 5_000)).toBe(true);
        await client.config('RESETSTAT');
        const result = await setClaimOn(transportOf(await storeClient(client)), recordKey('lead-retention', 'sc', 'k'), input('k', 'late'), 'late', now + 10_000);
        expect(result).toMatchObject({ acquired: false, record: { state: 'completed', leaseToken: 'planted', expiresAt: now + 5_000 } });
        expect(await scriptCalls(client)).toBe(1);
      });

      it('takes over a lease that is over by Redis’s clock, keeping the record’s creation time', async () => {
        const client = await server!.connect();
        const claimedAt = (await redisNow(client)) - 60_000;
        await plant(client, 'over', claimedAt, 1_000, RETENTION_MS);
        const store = createRedisStore({ client: await storeClient(client), prefix: 'over' });
        await store.ping();
        await client.config('RESETSTAT');
        const result = await store.claim(input('k', 'taker'));
        expect(result).toMatchObject({ acquired: true, claim: { leaseToken: 'taker', takeover: true } });
        expect(await scriptCalls(client)).toBe(1);
        expect(await store.get('sc', 'k')).toMatchObject({ state: 'in_progress', leaseToken: 'taker', createdAt: claimedAt });
        await store.close();
      });

      it('answers a bound that is not ahead of a live lease without the script: the lease stands', async () => {
        const client = await server!.connect();
        const now = await redisNow(client);
        await plant(client, 'stands', now, 5_000, RETENTION_MS);
        await client.config('RESETSTAT');
        const result = await setClaimOn(transportOf(await storeClient(client)), recordKey('stands', 'sc', 'k'), input('k', 'other'), 'other', now);
        expect(result).toMatchObject({ acquired: false, record: { leaseToken: 'planted' } });
        expect(await scriptCalls(client)).toBe(0);
      });
    });
  });
}
