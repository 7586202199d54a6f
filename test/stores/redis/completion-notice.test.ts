/**
 * The claim and the completion on one Redis, counted by a private server's `INFO commandstats`: the claim is
 * one plain `SET … NX GET` (a replay runs no script), the completion's script reads no `TIME` (the store
 * sends a bound of Redis's clock) and publishes only for a record a `waitFor` marked; a process whose own
 * clock is an hour off still claims and completes on Redis's time.
 */
import type { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { StoredResponse } from '../../../src/core/record.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { commandCalls, REDIS_DRIVERS, startPrivateRedis } from '../../support/redis-server.js';

const HOUR_MS = 3_600_000;
const FP = 'p'.repeat(64);
const OK: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
const input = (key: string) => ({ scope: 'plain', key, fingerprint: FP, leaseMs: 30_000, retentionMs: HOUR_MS });

for (const driver of REDIS_DRIVERS) {
  const server = await startPrivateRedis([]);
  afterAll(() => server?.stop());
  /** The store's client: `admin` itself, or a node-redis client to the same server (`admin` counts and inspects). */
  const storeClient = async (admin: Redis) => (driver === 'ioredis' ? admin : await server!.connectNodeRedis());

  describe.runIf(server !== undefined)(`redis store (${driver}): the completion`, () => {
    afterEach(() => {
      vi.restoreAllMocks();
    });

    it('claims a new key with one plain SET and completes it with one script, neither reading TIME, and publishes nothing', async () => {
      const client = await server!.connect();
      const store = createRedisStore({ client: await storeClient(client), prefix: 'count' });
      await store.ping();
      await client.config('RESETSTAT');
      const won = await store.claim(input('new'));
      if (!won.acquired) throw new Error('the new key was not claimed');
      expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
      const calls = await commandCalls(client);
      // The claim is one SET (NX GET); the completion's script met NOSCRIPT once and was loaded by EVAL, and its
      // own SET counts too; nobody waited, so the completion published nothing.
      expect({ set: calls.set, evalsha: calls.evalsha, eval: calls.eval, publish: calls.publish }).toEqual({ set: 2, evalsha: 1, eval: 1, publish: undefined });
      // The completion reads TIME only while the store has no bound of Redis's clock (a background resync of
      // the bound sends one too), so of a few new keys at least one is claimed and completed without it.
      let times = Number.POSITIVE_INFINITY;
      for (let i = 0; i < 10 && times > 0; i++) {
        await client.config('RESETSTAT');
        const next = await store.claim(input(`next-${i}`));
        if (!next.acquired) throw new Error('the new key was not claimed');
        expect(await store.complete(next.claim, OK, HOUR_MS)).toBe(true);
        times = (await commandCalls(client)).time ?? 0;
      }
      expect(times).toBe(0);
      await store.close();
    });

    it('answers a replay, a reused key and a claim in flight with one plain SET each and no script', async () => {
      const client = await server!.connect();
      const store = createRedisStore({ client: await storeClient(client), prefix: 'refusals' });
      const won = await store.claim(input('done'));
      if (!won.acquired) throw new Error('the new key was not claimed');
      expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
      expect((await store.claim(input('held'))).acquired).toBe(true);
      await client.config('RESETSTAT');
      for (let i = 0; i < 5; i++) {
        expect(await store.claim(input('done'))).toMatchObject({ acquired: false, record: { state: 'completed', leaseToken: won.claim.leaseToken, response: { status: 201 } } });
      }
      expect(await store.claim({ ...input('done'), fingerprint: 'q'.repeat(64) })).toMatchObject({ acquired: false, record: { state: 'completed' } });
      expect(await store.claim(input('held'))).toMatchObject({ acquired: false, record: { state: 'in_progress' } });
      const calls = await commandCalls(client);
      expect({ set: calls.set, evalsha: calls.evalsha, eval: calls.eval, get: calls.get }).toEqual({ set: 7, evalsha: undefined, eval: undefined, get: undefined });
      // The refused SETs wrote nothing: the completed record is byte for byte as the completion left it.
      expect((await store.get('plain', 'done'))?.response?.body).toEqual(Buffer.from('ok'));
      await store.close();
    });

    it('publishes a completion only for a record a waitFor marked, and wakes that waiter at once', async () => {
      const client = await server!.connect();
      const store = createRedisStore({ client: await storeClient(client), prefix: 'listen' });
      const won = await store.claim(input('k'));
      if (!won.acquired) throw new Error('the key was not claimed');
      const started = performance.now();
      const waiting = store.waitFor('plain', 'k', 10_000);
      // The mark lands once the waiter's SUBSCRIBE is acknowledged: the record's completion field turns 1.
      const key = (await client.keys('listen*'))[0] ?? '';
      for (let i = 0; i < 200 && (await client.getrangeBuffer(key, 25, 32)).readDoubleBE(0) !== 1; i++) await new Promise((r) => setTimeout(r, 5));
      expect((await client.getrangeBuffer(key, 25, 32)).readDoubleBE(0)).toBe(1);
      expect(await store.get('plain', 'k')).not.toHaveProperty('completedAt');
      await client.config('RESETSTAT');
      expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
      expect(await waiting).toMatchObject({ state: 'completed', leaseToken: won.claim.leaseToken });
      expect(performance.now() - started).toBeLessThan(5_000);
      expect((await commandCalls(client)).publish).toBe(1);
      await store.close();
    });

    for (const offset of [HOUR_MS, -HOUR_MS]) {
      it(`completes on Redis's time from a process whose clock is an hour ${offset > 0 ? 'ahead' : 'behind'}`, async () => {
        const client = await server!.connect();
        const realNow = Date.now.bind(Date);
        vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offset);
        const store = createRedisStore({ client: await storeClient(client), prefix: `skew${offset}` });
        const won = await store.claim(input('k'));
        if (!won.acquired) throw new Error('the key was not claimed');
        expect(Math.abs(won.claim.leaseExpiresAt - (realNow() + 30_000))).toBeLessThan(5_000);
        const record = await store.get('plain', 'k');
        expect(record?.leaseExpiresAt).toBe(won.claim.leaseExpiresAt);
        expect(Math.abs((record?.createdAt ?? 0) - realNow())).toBeLessThan(5_000);
        expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
        const completed = await store.get('plain', 'k');
        expect(Math.abs((completed?.completedAt ?? 0) - realNow())).toBeLessThan(5_000);
        expect(Math.abs((completed?.expiresAt ?? 0) - (realNow() + HOUR_MS))).toBeLessThan(5_000);
        await store.close();
      });
    }
  });
}
