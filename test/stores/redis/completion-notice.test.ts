/**
 * The completion on one Redis: its script reads no `TIME` (the store sends a bound of Redis's clock) and
 * publishes only for a record a `waitFor` marked, counted by a private server's `INFO commandstats`; a
 * process whose own clock is an hour off still completes on Redis's time.
 */
import type { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { StoredResponse } from '../../../src/core/record.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { startPrivateRedis } from '../../support/redis-server.js';

const HOUR_MS = 3_600_000;
const FP = 'p'.repeat(64);
const OK: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
const input = (key: string) => ({ scope: 'plain', key, fingerprint: FP, leaseMs: 30_000, retentionMs: HOUR_MS });

const server = await startPrivateRedis([]);
afterAll(() => server?.stop());

/** Calls per command since the last reset, from `INFO commandstats` (`set`, `evalsha`, `time` …). */
async function commandCalls(client: Redis): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const [, name, count] of (await client.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[name ?? ''] = Number(count);
  return calls;
}

describe.runIf(server !== undefined)('redis store: the completion', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('claims and completes a new key with two scripts and no PUBLISH, the completion without TIME, and replays with one script', async () => {
    const client = await server!.connect();
    const store = createRedisStore({ client, prefix: 'count' });
    await store.ping();
    await client.config('RESETSTAT');
    const won = await store.claim(input('new'));
    if (!won.acquired) throw new Error('the new key was not claimed');
    expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
    const replay = await store.claim(input('new'));
    expect(replay).toMatchObject({ acquired: false, record: { state: 'completed', response: { status: 201 } } });
    const calls = await commandCalls(client);
    // Each script met NOSCRIPT once and was loaded by EVAL; nobody waited, so the completion published nothing.
    expect({ evalsha: calls.evalsha, eval: calls.eval, publish: calls.publish }).toEqual({ evalsha: 3, eval: 2, publish: undefined });
    // Each claim reads TIME; the completion reads it only while the store's bound of Redis's clock is too
    // loose (a slow TIME reply on a loaded host), so of a few new keys at least one completes without it.
    let completionTimes = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 10 && completionTimes > 0; i++) {
      const next = await store.claim(input(`next-${i}`));
      if (!next.acquired) throw new Error('the new key was not claimed');
      await client.config('RESETSTAT');
      expect(await store.complete(next.claim, OK, HOUR_MS)).toBe(true);
      completionTimes = (await commandCalls(client)).time ?? 0;
    }
    expect(completionTimes).toBe(0);
    await store.close();
  });

  it('publishes a completion only for a record a waitFor marked, and wakes that waiter at once', async () => {
    const client = await server!.connect();
    const store = createRedisStore({ client, prefix: 'listen' });
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
      const store = createRedisStore({ client, prefix: `skew${offset}` });
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
