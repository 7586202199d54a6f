/**
 * The plain claim on Redis 7 and later: a new key costs one `SET … NX GET` and one completion script, a
 * replay or a refusal one `SET` and no script (counted by the private server's `INFO commandstats`); a
 * lease that may be over still goes to the claim script, which reports the takeover; and a process whose
 * own clock is an hour off still writes Redis's time.
 */
import type { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { startPrivateRedis } from '../../support/redis-server.js';

const HOUR_MS = 3_600_000;
const FP = 'p'.repeat(64);
const OK: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
const input = (key: string, leaseMs = 30_000) => ({ scope: 'plain', key, fingerprint: FP, leaseMs, retentionMs: HOUR_MS });

const server = await startPrivateRedis([]);
afterAll(() => server?.stop());

/** Calls per command since the last reset, from `INFO commandstats` (`set`, `evalsha`, `time` …). */
async function commandCalls(client: Redis): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const [, name, count] of (await client.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[name ?? ''] = Number(count);
  return calls;
}

describe.runIf(server !== undefined)('redis store: the plain claim', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('claims and completes a new key with one SET and one script, replays and refuses with one SET and none, and calls no TIME', async () => {
    const client = await server!.connect();
    const store = createRedisStore({ client, prefix: 'count' });
    await store.ping();
    await client.config('RESETSTAT');
    const won = await store.claim(input('new'));
    if (!won.acquired) throw new Error('the new key was not claimed');
    expect(won.claim.takeover).toBe(false);
    const held = await store.claim(input('new'));
    expect(held).toMatchObject({ acquired: false, record: { state: 'in_progress', leaseToken: won.claim.leaseToken } });
    expect(await store.complete(won.claim, OK, HOUR_MS)).toBe(true);
    const replay = await store.claim(input('new'));
    expect(replay).toMatchObject({ acquired: false, record: { state: 'completed', response: { status: 201 } } });
    const calls = await commandCalls(client);
    // Three plain claims (a win, a refusal, a replay), and one completion script (loaded by EVAL after
    // EVALSHA met NOSCRIPT) with its SET; nobody waited, so it published nothing.
    expect({ set: calls.set, evalsha: calls.evalsha, eval: calls.eval, time: calls.time, publish: calls.publish }).toEqual({
      set: 4,
      evalsha: 1,
      eval: 1,
      time: undefined,
      publish: undefined,
    });
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

  it('leaves a lease that may be over to the claim script, which reports the takeover, and fences the crashed holder', async () => {
    const client = await server!.connect();
    const clock = new ManualClock(1_800_000_000_000);
    const store = createRedisStore({ client, prefix: 'takeover', clock });
    const first = await store.claim(input('k', 1_000));
    if (!first.acquired) throw new Error('the key was not claimed');
    clock.advance(1_000);
    const second = await store.claim(input('k', 1_000));
    if (!second.acquired) throw new Error('the expired lease was not taken over');
    expect(second.claim.takeover).toBe(true);
    expect(second.claim.leaseExpiresAt).toBe(clock.now() + 1_000);
    expect(await store.complete(first.claim, OK, HOUR_MS)).toBe(false);
    expect(await store.complete(second.claim, OK, HOUR_MS)).toBe(true);
    expect(await store.get('plain', 'k')).toMatchObject({ state: 'completed', leaseToken: second.claim.leaseToken, completedAt: clock.now() });
    await store.close();
  });

  for (const offset of [HOUR_MS, -HOUR_MS]) {
    it(`writes Redis's time from a process whose clock is an hour ${offset > 0 ? 'ahead' : 'behind'}`, async () => {
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
