import { Redis } from 'ioredis';
import { createServer } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { LeaseLostError } from '../../../src/core/errors.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { createReceiver } from '../../../src/receiver.js';
import { createRedisStore, openRedisStore, REDIS_TTL_GRACE_MS } from '../../../src/stores/redis/index.js';
import { recordKey } from '../../../src/stores/redis/keys.js';
import { CLAIM_LUA } from '../../../src/stores/redis/scripts/claim.lua.js';
import { LuaScript } from '../../../src/stores/redis/script.js';
import { transportOf } from '../../../src/stores/redis/transport.js';
import type { ClaimInput } from '../../../src/core/store.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { countSocketWrites, deleteUnder, keysUnder, redisContractFixtures } from '../../support/redis.js';
import { connectNodeRedis, REDIS_DRIVERS } from '../../support/redis-server.js';
import { storeContract } from '../contract.js';

const FILE_PREFIX = uniqueName('rs_redis');
const FP = 'f'.repeat(64);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'shared', key, fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000, ...overrides };
}

function text(body: string, status = 200): StoredResponse {
  return { status, headers: { 'content-type': 'text/plain' }, body: encoder.encode(body) };
}

/** A second connection to the same server. */
async function secondConnection(): Promise<Redis> {
  const other = client.duplicate();
  await other.connect();
  return other;
}

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
/** The same server through ioredis's automatic pipelining: commands sent in one tick share a write. */
const pipelined = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1, enableAutoPipelining: true });

if (await serviceAvailable('Redis', () => client.connect())) {
  await pipelined.connect();
  /** The same server through node-redis (`createClient()` of `redis`). */
  const nodeRedis = await connectNodeRedis(REDIS_URL);
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
    await pipelined.quit();
    await nodeRedis.close();
  });

  storeContract('redis', redisContractFixtures(client, FILE_PREFIX));
  storeContract('redis with enableAutoPipelining', redisContractFixtures(pipelined, `${FILE_PREFIX}:pipelined`));
  storeContract('redis on node-redis', redisContractFixtures(nodeRedis, `${FILE_PREFIX}:node-redis`));

  describe('redis store', () => {
    it('keeps records under the prefix, one string key per record, with a real TTL of the retention plus the grace', async () => {
      const prefix = `${FILE_PREFIX}:ttl`;
      const clock = new ManualClock(5_000_000_000_000);
      const store = createRedisStore({ client, prefix, clock });
      const claimed = await store.claim(input('k', { leaseMs: 1_000, retentionMs: 20_000 }));
      expect(claimed.acquired).toBe(true);
      expect(await keysUnder(client, prefix)).toEqual([recordKey(prefix, 'shared', 'k')]);
      const inProgressTtl = await client.pttl(recordKey(prefix, 'shared', 'k'));
      expect(inProgressTtl).toBeGreaterThan(20_000 + REDIS_TTL_GRACE_MS - 5_000);
      expect(inProgressTtl).toBeLessThanOrEqual(20_000 + REDIS_TTL_GRACE_MS);
      if (!claimed.acquired) return;
      // A fake clock far from the wall clock does not shorten the real TTL: it is relative.
      clock.advance(1_000);
      expect(await store.complete(claimed.claim, text('ok'), 3_600_000)).toBe(true);
      const completedTtl = await client.pttl(recordKey(prefix, 'shared', 'k'));
      expect(completedTtl).toBeGreaterThan(3_600_000 + REDIS_TTL_GRACE_MS - 5_000);
      expect(completedTtl).toBeLessThanOrEqual(3_600_000 + REDIS_TTL_GRACE_MS);
      await store.close();
      await deleteUnder(client, prefix);
    });

    it('keeps braces, NUL and percent signs in scopes and keys apart and inside one hash tag', async () => {
      const prefix = `${FILE_PREFIX}:tags`;
      const store = createRedisStore({ client, prefix, clock: new ManualClock(1_000) });
      const pairs: [string, string][] = [
        ['a}', '{b'],
        ['a', '}{b'],
        ['a\u0000b', 'c'],
        ['a', 'b\u0000c'],
        ['%7D', 'x'],
        ['}', 'x'],
      ];
      for (const [scope, key] of pairs) expect((await store.claim(input(key, { scope }))).acquired).toBe(true);
      for (const [scope, key] of pairs) expect(await store.get(scope, key)).toMatchObject({ scope, key });
      for (const [scope, key] of pairs) {
        const name = recordKey(prefix, scope, key);
        // Redis Cluster hashes the text between the first "{" and the next "}": it must run to the end.
        const open = name.indexOf('{');
        expect(name.indexOf('}', open)).toBe(name.length - 1);
      }
      expect(new Set(pairs.map(([scope, key]) => recordKey(prefix, scope, key))).size).toBe(pairs.length);
      await store.close();
      await deleteUnder(client, prefix);
    });

    it('runs scripts by EVALSHA once loaded, and loads them again when the cache lacks them', async () => {
      const script = new LuaScript(CLAIM_LUA);
      const probe = new LuaScript(`return '${uniqueName('probe')}'`);
      expect(await client.script('EXISTS', probe.sha)).toEqual([0]);
      expect(decoder.decode((await probe.run(transportOf(client), [], [])) as Buffer)).toMatch(/^probe_/);
      expect(await client.script('EXISTS', probe.sha)).toEqual([1]);
      expect(script.sha).toMatch(/^[0-9a-f]{40}$/);
    });

    it('loads a script the cache lacks through an automatic pipeline too, and runs it there by EVALSHA after', async () => {
      const probe = new LuaScript(`return '${uniqueName('probe')}'`);
      expect(await client.script('EXISTS', probe.sha)).toEqual([0]);
      // Two runs in one tick share a pipeline: both meet NOSCRIPT and are loaded by EVAL.
      const first = await Promise.all([probe.run(transportOf(pipelined), [], []), probe.run(transportOf(pipelined), [], [])]);
      expect(first.map((reply) => decoder.decode(reply as Buffer))).toEqual([expect.stringMatching(/^probe_/), expect.stringMatching(/^probe_/)]);
      expect(await client.script('EXISTS', probe.sha)).toEqual([1]);
      expect(decoder.decode((await probe.run(transportOf(pipelined), [], [])) as Buffer)).toMatch(/^probe_/);
    });

    it.each(REDIS_DRIVERS)('waits through pub/sub for the original on another connection (%s), in the engine\'s wait mode', async (driver) => {
      const prefix = `${FILE_PREFIX}:wait-${driver}`;
      const other = driver === 'ioredis' ? await secondConnection() : await connectNodeRedis(REDIS_URL);
      const first = createRedisStore({ client, prefix });
      const second = createRedisStore({ client: other, prefix });
      const original = createReceiver({ store: first });
      const duplicate = createReceiver({ store: second, inFlight: 'wait', waitTimeoutMs: 5_000, pollIntervalMs: 5_000 });
      let executions = 0;
      let finish!: () => void;
      const gate = new Promise<void>((resolve) => (finish = resolve));
      const id = { scope: 's', key: 'k', fingerprint: FP };
      const running = original.execute(id, async () => {
        executions++;
        await gate;
        return text('first');
      });
      while ((await first.get('s', 'k'))?.state !== 'in_progress') await new Promise((r) => setTimeout(r, 5));
      const waiting = duplicate.execute(id, () => {
        executions++;
        return Promise.resolve(text('second'));
      });
      await new Promise((r) => setTimeout(r, 50));
      const started = performance.now();
      finish();
      const [a, b] = await Promise.all([running, waiting]);
      // pollIntervalMs is 5 s: an answer well under it came from the notification.
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(executions).toBe(1);
      expect(decoder.decode(a.response.body)).toBe('first');
      expect(b).toMatchObject({ replayed: true });
      expect(decoder.decode(b.response.body)).toBe('first');
      await first.close();
      await second.close();
      await other.quit();
      await deleteUnder(client, prefix);
    });

    it('fences a stale worker whose lease was taken over: its late result is refused and the winner stands', async () => {
      const prefix = `${FILE_PREFIX}:stale`;
      const clock = new ManualClock(1_700_000_000_000);
      const other = await secondConnection();
      const receiverA = createReceiver({ store: createRedisStore({ client, prefix, clock }), clock, leaseMs: 1_000 });
      const receiverB = createReceiver({ store: createRedisStore({ client: other, prefix, clock }), clock, leaseMs: 1_000 });
      const id = { scope: 's', key: 'pay-1', fingerprint: FP };
      let effects = 0;
      let resume!: () => void;
      const paused = new Promise<void>((resolve) => (resume = resolve));
      let claimed!: () => void;
      const aClaimed = new Promise<void>((resolve) => (claimed = resolve));
      const stale = receiverA.execute(id, async () => {
        effects++;
        claimed();
        await paused;
        return text('from A');
      });
      await aClaimed;
      clock.advance(1_000);
      const winner = await receiverB.execute(id, ({ claim }) => {
        effects++;
        expect(claim.takeover).toBe(true);
        return Promise.resolve(text('from B'));
      });
      expect(decoder.decode(winner.response.body)).toBe('from B');
      resume();
      await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
      const replay = await receiverA.execute(id, () => Promise.reject(new Error('must not run')));
      expect(replay.replayed).toBe(true);
      expect(decoder.decode(replay.response.body)).toBe('from B');
      expect(effects).toBe(2);
      await other.quit();
      await deleteUnder(client, prefix);
    });

    it('answers a claim run twice with its token (ioredis resending it after a dropped reply) as the win it was', async () => {
      const prefix = `${FILE_PREFIX}:resent`;
      const clock = new ManualClock(1_700_000_000_000);
      // The resend carries the first run's arguments, its token included: two claims with one token model it.
      const ids = ['t1', 't1', 't2', 't3', 't3'];
      const store = createRedisStore({ client, prefix, clock, generateId: () => ids.shift() ?? 'spent' });
      const first = await store.claim(input('k1', { leaseMs: 1_000 }));
      clock.advance(40);
      const resent = await store.claim(input('k1', { leaseMs: 1_000 }));
      expect(resent).toEqual(first);
      expect(first).toMatchObject({ acquired: true, claim: { leaseToken: 't1', takeover: false, leaseExpiresAt: 1_700_000_001_000 } });
      // Anyone else is still refused the live lease.
      expect(await store.claim(input('k1', { leaseMs: 1_000 }))).toMatchObject({ acquired: false, record: { leaseToken: 't1' } });
      clock.advance(1_000);
      const takeover = await store.claim(input('k1', { leaseMs: 1_000 }));
      clock.advance(40);
      expect(await store.claim(input('k1', { leaseMs: 1_000 }))).toEqual(takeover);
      expect(takeover).toMatchObject({ acquired: true, claim: { leaseToken: 't3', takeover: true } });
      await store.close();
      await deleteUnder(client, prefix);
    });

    it('answers a completion run again by its own token (ioredis resending it after a dropped reply) as saved, changing nothing', async () => {
      const prefix = `${FILE_PREFIX}:recompleted`;
      const clock = new ManualClock(1_700_000_000_000);
      const store = createRedisStore({ client, prefix, clock });
      const claim = await store.claim(input('k1'));
      if (!claim.acquired) throw new Error('claim refused');
      expect(await store.complete(claim.claim, text('saved', 201), 60_000)).toBe(true);
      const saved = await store.get('shared', 'k1');
      clock.advance(40);
      expect(await store.complete(claim.claim, text('saved', 201), 60_000)).toBe(true);
      expect(await store.complete(claim.claim, text('saved', 200), 60_000)).toBe(true);
      expect(await store.complete(claim.claim, text('other', 201), 60_000)).toBe(true);
      expect(await store.get('shared', 'k1')).toEqual(saved);
      await store.close();
      await deleteUnder(client, prefix);
    });

    it('reaps only its own prefix, even when the prefix holds glob characters or starts another prefix', async () => {
      const clock = new ManualClock(1_000_000);
      const globbed = createRedisStore({ client, prefix: `${FILE_PREFIX}:g*[ab]?`, clock });
      const lookalike = createRedisStore({ client, prefix: `${FILE_PREFIX}:gXaY`, clock });
      const nested = createRedisStore({ client, prefix: `${FILE_PREFIX}:g*[ab]?:more`, clock });
      for (const store of [globbed, lookalike, nested]) {
        for (const key of ['a', 'b']) expect((await store.claim(input(key, { leaseMs: 1_000, retentionMs: 1_000 }))).acquired).toBe(true);
      }
      clock.advance(1_000);
      expect(await globbed.reap(100)).toBe(2);
      expect(await globbed.get('shared', 'a')).toBeUndefined();
      for (const store of [lookalike, nested]) expect((await store.get('shared', 'a'))?.state).toBe('in_progress');
      expect(await lookalike.reap(1)).toBe(1);
      expect(await lookalike.reap(1)).toBe(1);
      expect(await lookalike.reap(1)).toBe(0);
      expect(await nested.reap(100)).toBe(2);
    });

    it('rejects invalid options with a TypeError naming the option', () => {
      expect(() => createRedisStore({ client: {} as Redis })).toThrow(/option "client"/);
      expect(() => createRedisStore({ client, prefix: '' })).toThrow(/option "prefix"/);
      expect(() => createRedisStore({ client, prefix: 'a{b' })).toThrow(/option "prefix" must be a non-empty string without/);
      expect(() => createRedisStore({ client, clock: {} as ManualClock })).toThrow(/option "clock"/);
      expect(() => createRedisStore({ client, generateId: 'x' as unknown as () => string })).toThrow(/option "generateId"/);
      expect(() => createRedisStore({ client, subscriber: {} as Redis })).toThrow(/option "subscriber"/);
      expect(() => createRedisStore({ client, waitReplicas: -1 })).toThrow(/option "waitReplicas"/);
      expect(() => createRedisStore({ client, waitReplicas: 1.5 })).toThrow(/option "waitReplicas"/);
      expect(() => createRedisStore({ client, waitReplicasTimeoutMs: 0 })).toThrow(/option "waitReplicasTimeoutMs"/);
      expect(() => createRedisStore(undefined as unknown as { client: Redis })).toThrow(TypeError);
    });

    it('opens a store from a URL that owns its connection and closes it with the store', async () => {
      const prefix = `${FILE_PREFIX}:url`;
      const store = await openRedisStore(REDIS_URL, { prefix, clock: new ManualClock(1_000) });
      const claimed = await store.claim(input('k'));
      expect(claimed.acquired).toBe(true);
      expect((await store.get('shared', 'k'))?.state).toBe('in_progress');
      expect(await keysUnder(client, prefix)).toEqual([recordKey(prefix, 'shared', 'k')]);
      await store.close();
      await expect(store.get('shared', 'k')).rejects.toThrow();
      await deleteUnder(client, prefix);
    });

    it('keeps its records under the ?prefix= of the URL, which the driver never sees', async () => {
      const prefix = `${FILE_PREFIX}:urlprefix`;
      const separator = REDIS_URL.includes('?') ? '&' : '?';
      // `family=4` is ioredis's own parameter: it must still reach the driver once ?prefix= is taken out.
      const store = await openRedisStore(`${REDIS_URL}${separator}prefix=${encodeURIComponent(prefix)}&family=4`);
      try {
        expect((await store.claim(input('url-k'))).acquired).toBe(true);
        expect(await keysUnder(client, prefix)).toEqual([recordKey(prefix, 'shared', 'url-k')]);
        expect(await client.exists(recordKey('retrysafe', 'shared', 'url-k'))).toBe(0);
        // The same prefix in the options agrees; another one is refused before connecting.
        const agreeing = await openRedisStore(`${REDIS_URL}${separator}prefix=${encodeURIComponent(prefix)}`, { prefix });
        expect((await agreeing.get('shared', 'url-k'))?.state).toBe('in_progress');
        await agreeing.close();
        await expect(openRedisStore(`${REDIS_URL}${separator}prefix=${encodeURIComponent(prefix)}`, { prefix: 'other' })).rejects.toThrow(
          /option "prefix" must be the \?prefix= of the URL/,
        );
        await expect(openRedisStore(`${REDIS_URL}${separator}prefix=`)).rejects.toThrow(/must be non-empty/);
      } finally {
        await store.close();
        await deleteUnder(client, prefix);
      }
    });

    it('refuses a URL of another scheme, and rejects when nothing listens at the URL', async () => {
      await expect(openRedisStore('postgres://127.0.0.1:5432/test')).rejects.toThrow(TypeError);
      const port = await new Promise<number>((resolve) => {
        const server = createServer().listen(0, '127.0.0.1', () => {
          const address = server.address();
          server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
        });
      });
      await expect(openRedisStore(`redis://127.0.0.1:${port}`)).rejects.toThrow(/ECONNREFUSED|Connection is closed/);
    });

    it('implements the optional checkpoint and listAbandoned, also on a store opened from a URL, so the contract runs them', async () => {
      const store = createRedisStore({ client, prefix: `${FILE_PREFIX}:methods` });
      const won = await store.claim({ scope: 's', key: 'methods', fingerprint: 'f', leaseMs: 1_000, retentionMs: 60_000 });
      if (!won.acquired) throw new Error('expected to win');
      expect((await store.checkpoint(won.claim, 'p', 0))?.recoveryPoint).toBe('p');
      const opened = await openRedisStore(REDIS_URL, { prefix: `${FILE_PREFIX}:methods` });
      expect((await opened.listAbandoned?.(5))?.map((record) => [record.key, record.recoveryPoint])).toEqual([['methods', 'p']]);
      expect(await opened.checkpoint?.(won.claim, 'q', 1_000)).toMatchObject({ recoveryPoint: 'q' });
      expect(await opened.listAbandoned?.(1)).toEqual([]);
      await opened.close();
      await store.close();
    });

    it('stretches the real TTL when a checkpoint renews the lease past the retention', async () => {
      const prefix = `${FILE_PREFIX}:cpttl`;
      const store = createRedisStore({ client, prefix, clock: new ManualClock(5_000_000_000_000) });
      const claimed = await store.claim(input('k', { leaseMs: 1_000, retentionMs: 20_000 }));
      if (!claimed.acquired) throw new Error('expected to win');
      expect((await store.checkpoint(claimed.claim, 'p', 3_600_000))?.recoveryPoint).toBe('p');
      const ttl = await client.pttl(recordKey(prefix, 'shared', 'k'));
      expect(ttl).toBeGreaterThan(3_600_000 + REDIS_TTL_GRACE_MS - 5_000);
      expect(ttl).toBeLessThanOrEqual(3_600_000 + REDIS_TTL_GRACE_MS);
      await store.close();
      await deleteUnder(client, prefix);
    });

    it('finds the oldest abandoned records across many SCAN steps, and only under its own prefix', async () => {
      const prefix = `${FILE_PREFIX}:abandoned`;
      const clock = new ManualClock(1_700_000_000_000);
      const store = createRedisStore({ client, prefix, clock });
      const lookalike = createRedisStore({ client, prefix: `${prefix}x`, clock });
      // 900 ordinary records: several SCAN steps of about 250 keys each.
      for (let i = 0; i < 900; i += 100) {
        await Promise.all(Array.from({ length: 100 }, (_, j) => store.claim(input(`plain-${i + j}`, { leaseMs: 1_000 }))));
      }
      const abandon = async (target: typeof store, key: string, leaseMs: number): Promise<void> => {
        const claimed = await target.claim(input(key));
        if (!claimed.acquired) throw new Error('expected to win');
        await target.checkpoint(claimed.claim, `point-${key}`, leaseMs);
      };
      for (const [key, leaseMs] of [['e', 500], ['a', 100], ['d', 400], ['b', 200], ['c', 300]] as const) {
        await abandon(store, key, leaseMs);
      }
      await abandon(lookalike, 'other', 0);
      clock.advance(1_000);
      const found = await store.listAbandoned(3);
      expect(found.map((record) => [record.key, record.recoveryPoint])).toEqual([
        ['a', 'point-a'],
        ['b', 'point-b'],
        ['c', 'point-c'],
      ]);
      expect((await store.listAbandoned(100)).map((record) => record.key)).toEqual(['a', 'b', 'c', 'd', 'e']);
      await expect(store.listAbandoned(0)).rejects.toThrow(TypeError);
      await deleteUnder(client, prefix);
    });

    it('sends the scripts of one turn of the event loop in one socket write, each with its own answer', async () => {
      const prefix = `${FILE_PREFIX}:coalesced`;
      const other = await secondConnection();
      const store = createRedisStore({ client: other, prefix });
      // The store's first operation reads the server's eviction policy first; count from after it.
      await store.ping();
      const writes = countSocketWrites(other.stream);
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const claims = await Promise.all(keys.map((key) => store.claim(input(key))));
      expect(writes()).toBe(1);
      expect(claims.map((result) => result.acquired)).toEqual(keys.map(() => true));
      const tokens = new Set(claims.map((result) => (result.acquired ? result.claim.leaseToken : '')));
      expect(tokens.size).toBe(20);
      const before = writes();
      const again = await Promise.all(keys.map((key) => store.claim(input(key))));
      expect(writes() - before).toBe(1);
      expect(again.map((result) => result.acquired)).toEqual(keys.map(() => false));
      await store.close();
      await other.quit();
      await deleteUnder(client, prefix);
    });

    it('loses no claim when the socket closes with the turn\'s scripts still waiting to be written', async () => {
      const prefix = `${FILE_PREFIX}:corked-close`;
      // ioredis's defaults: reconnect, and resend what was sent but not answered.
      const other = new Redis(REDIS_URL);
      const store = createRedisStore({ client: other, prefix });
      await store.claim(input('warm'));
      const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
      const pending = keys.map((key) => store.claim(input(key)));
      // Still in the turn that sent them: the scripts sit in the corked socket, not yet written.
      expect(other.stream.writableCorked).toBe(1);
      expect(other.stream.writableLength).toBeGreaterThan(0);
      other.stream.destroy();
      const claims = await Promise.all(pending);
      expect(claims.map((result) => result.acquired)).toEqual(keys.map(() => true));
      for (const [i, key] of keys.entries()) {
        const record = await store.get('shared', key);
        expect(record?.leaseToken).toBe(claims[i]?.acquired ? claims[i].claim.leaseToken : undefined);
      }
      await store.close();
      await other.quit();
      await deleteUnder(client, prefix);
    });

    it('uses the injected id generator for fencing tokens', async () => {
      const prefix = `${FILE_PREFIX}:ids`;
      let n = 0;
      const store = createRedisStore({ client, prefix, clock: new ManualClock(0), generateId: () => `token-${++n}` });
      const result = await store.claim(input('k'));
      expect(result.acquired && result.claim.leaseToken).toBe('token-1');
      expect((await store.get('shared', 'k'))?.leaseToken).toBe('token-1');
      await deleteUnder(client, prefix);
    });
  });
}
