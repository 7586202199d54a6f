/**
 * Records written by retrysafe 0.1.0, one hash field per record field, still count after an upgrade: every
 * script and every read finds them, rewrites each as a record value in place (keeping its real TTL), and
 * decides as it would have. The hashes are written here field for field as 0.1.0's scripts wrote them.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { Claim } from '../../../src/core/record.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { recordKey } from '../../../src/stores/redis/keys.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { deleteUnder } from '../../support/redis.js';

const PREFIX = uniqueName('rs_redis_upgrade');
const NOW = 5_000_000_000_000;
const FP = 'f'.repeat(64);
const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

/** Writes a 0.1.0 record hash for (`scope`, `key`) under `prefix`, with a real TTL of `ttlMs`. */
async function oldRecord(prefix: string, key: string, fields: Record<string, string | Buffer>, ttlMs = 600_000): Promise<string> {
  const name = recordKey(prefix, 'tenant', key);
  await client.hset(name, { scope: 'tenant', key, fp: FP, token: 'old-token', created: String(NOW - 10_000), ...fields });
  await client.pexpire(name, ttlMs);
  return name;
}

const completed = {
  state: 'completed',
  lease: String(NOW - 5_000),
  expires: String(NOW + 60_000),
  completed: String(NOW - 6_000),
  status: '201',
  headers: '{"content-type":"application/octet-stream"}',
  body: Buffer.from([0, 1, 255, 10]),
};

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await deleteUnder(client, PREFIX);
    await client.quit();
  });

  describe('redis store: records written by retrysafe 0.1.0', () => {
    it('reads a completed record hash, rewriting it as one record value with its real TTL kept', async () => {
      const prefix = `${PREFIX}:get`;
      const name = await oldRecord(prefix, 'k', completed, 400_000);
      const store = createRedisStore({ client, prefix, clock: new ManualClock(NOW) });
      const record = await store.get('tenant', 'k');
      expect(record).toMatchObject({
        scope: 'tenant',
        key: 'k',
        fingerprint: FP,
        state: 'completed',
        leaseToken: 'old-token',
        leaseExpiresAt: NOW - 5_000,
        createdAt: NOW - 10_000,
        expiresAt: NOW + 60_000,
        completedAt: NOW - 6_000,
      });
      expect(record?.recoveryPoint).toBeUndefined();
      expect(record?.response?.status).toBe(201);
      expect(record?.response?.headers).toEqual({ 'content-type': 'application/octet-stream' });
      expect(Buffer.from(record?.response?.body ?? [])).toEqual(completed.body);
      expect(await client.type(name)).toBe('string');
      const ttl = await client.pttl(name);
      expect(ttl).toBeGreaterThan(390_000);
      expect(ttl).toBeLessThanOrEqual(400_000);
      expect(await store.get('tenant', 'k')).toEqual(record);
      await store.close();
    });

    it('replays a completed record hash to a duplicate claim, and refuses another fingerprint', async () => {
      const prefix = `${PREFIX}:replay`;
      await oldRecord(prefix, 'k', completed);
      const store = createRedisStore({ client, prefix, clock: new ManualClock(NOW) });
      const replay = await store.claim({ scope: 'tenant', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 });
      expect(replay.acquired).toBe(false);
      if (replay.acquired) return;
      expect(Buffer.from(replay.record.response?.body ?? [])).toEqual(completed.body);
      const other = await store.claim({ scope: 'tenant', key: 'k', fingerprint: 'other', leaseMs: 1_000, retentionMs: 60_000 });
      expect(other).toMatchObject({ acquired: false, record: { fingerprint: FP, state: 'completed' } });
      await store.close();
    });

    it('takes over an in-progress record hash whose lease expired, with its recovery point, and completes it once', async () => {
      const prefix = `${PREFIX}:takeover`;
      await oldRecord(prefix, 'k', { state: 'in_progress', lease: String(NOW - 1), expires: String(NOW + 60_000), rp: 'charged' });
      const clock = new ManualClock(NOW);
      const store = createRedisStore({ client, prefix, clock });
      expect(await store.countExpiredLeases?.(10)).toBe(1);
      expect((await store.listAbandoned?.(10))?.map((record) => record.recoveryPoint)).toEqual(['charged']);
      const won = await store.claim({ scope: 'tenant', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 });
      expect(won).toMatchObject({ acquired: true, claim: { takeover: true, recoveryPoint: 'charged', leaseExpiresAt: NOW + 1_000 } });
      if (!won.acquired) return;
      const stale: Claim = { ...won.claim, leaseToken: 'old-token' };
      const body = new TextEncoder().encode('done');
      expect(await store.complete(stale, { status: 200, headers: {}, body }, 60_000)).toBe(false);
      expect(await store.complete(won.claim, { status: 200, headers: {}, body }, 60_000)).toBe(true);
      expect(await store.get('tenant', 'k')).toMatchObject({ state: 'completed', createdAt: NOW - 10_000, recoveryPoint: 'charged' });
      await store.close();
    });

    it('lets the holder of an in-progress record hash complete, checkpoint or release it under its fencing token', async () => {
      const prefix = `${PREFIX}:holder`;
      const live = { state: 'in_progress', lease: String(NOW + 30_000), expires: String(NOW + 60_000) };
      await oldRecord(prefix, 'done', live);
      await oldRecord(prefix, 'point', live);
      await oldRecord(prefix, 'gone', live);
      const store = createRedisStore({ client, prefix, clock: new ManualClock(NOW) });
      const held = (key: string): Claim => ({ scope: 'tenant', key, fingerprint: FP, leaseToken: 'old-token', leaseExpiresAt: NOW + 30_000, takeover: false });
      expect(await store.complete(held('done'), { status: 204, headers: {}, body: new Uint8Array() }, 60_000)).toBe(true);
      expect((await store.get('tenant', 'done'))?.response?.status).toBe(204);
      expect(await store.checkpoint(held('point'), 'step-1', 5_000)).toMatchObject({ recoveryPoint: 'step-1', leaseExpiresAt: NOW + 5_000 });
      expect(await store.get('tenant', 'point')).toMatchObject({ state: 'in_progress', recoveryPoint: 'step-1', expiresAt: NOW + 60_000 });
      expect(await store.release(held('gone'))).toBe(true);
      expect(await store.get('tenant', 'gone')).toBeUndefined();
      await store.close();
    });

    it('lists record hashes and reaps the expired ones', async () => {
      const prefix = `${PREFIX}:list`;
      await oldRecord(prefix, 'a', completed);
      await oldRecord(prefix, 'b', { ...completed, expires: String(NOW - 1) });
      const store = createRedisStore({ client, prefix, clock: new ManualClock(NOW) });
      expect((await store.listRecords?.({ limit: 10 }))?.map((record) => record.key)).toEqual(['a', 'b']);
      expect(await store.reap(10)).toBe(1);
      expect((await store.listRecords?.({ limit: 10 }))?.map((record) => record.key)).toEqual(['a']);
      await store.close();
    });

    it('refuses a key under the prefix that holds neither layout, and leaves it alone', async () => {
      const prefix = `${PREFIX}:foreign`;
      const name = recordKey(prefix, 'tenant', 'k');
      await client.rpush(name, 'x');
      const store = createRedisStore({ client, prefix, clock: new ManualClock(NOW) });
      await expect(store.get('tenant', 'k')).rejects.toThrow('holds neither a record value nor a retrysafe 0.1.0 record hash');
      await expect(store.claim({ scope: 'tenant', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 })).rejects.toThrow(
        'holds neither a record value nor a retrysafe 0.1.0 record hash',
      );
      expect(await client.lrange(name, 0, -1)).toEqual(['x']);
      await store.close();
    });
  });
}
