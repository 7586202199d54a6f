import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createRedisSessionStore, createSessionReceiver, type SessionStore } from '../../src/sessions/index.js';
import { deleteUnder, keysUnder } from '../support/redis.js';
import { connectNodeRedis } from '../support/redis-server.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../support/services.js';
import { sessionSuite } from './contract.js';

const FILE_PREFIX = uniqueName('rs_sessions');

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

if (await serviceAvailable('Redis', () => client.connect())) {
  const nodeRedis = await connectNodeRedis(REDIS_URL);
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
    await nodeRedis.close();
  });

  let stores = 0;
  sessionSuite('the Redis store', () => createRedisSessionStore({ client, prefix: `${FILE_PREFIX}:s${++stores}` }));
  sessionSuite('the Redis store on node-redis', () => createRedisSessionStore({ client: nodeRedis, prefix: `${FILE_PREFIX}:s${++stores}` }));

  describe('Redis session store', () => {
    it('applies one request number once when two connections race on it, and shares one session state', async () => {
      const prefix = `${FILE_PREFIX}:race`;
      const other = client.duplicate();
      await other.connect();
      try {
        const clock = new ManualClock(1_700_000_000_000);
        const stores: SessionStore[] = [createRedisSessionStore({ client, prefix }), createRedisSessionStore({ client: other, prefix })];
        const receivers = stores.map((store) => createSessionReceiver({ store, clock }));
        const [a, b] = receivers as [(typeof receivers)[number], (typeof receivers)[number]];
        const clientId = await a.register();
        let executions = 0;
        let open = (): void => undefined;
        const held = new Promise<void>((resolve) => (open = resolve));
        const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
        const racing = Promise.allSettled(
          Array.from({ length: 20 }, (_, i) =>
            (i % 2 === 0 ? a : b).apply(request, async () => {
              executions++;
              await held;
              return `from ${i % 2 === 0 ? 'a' : 'b'}`;
            }),
          ),
        );
        await new Promise((resolve) => setTimeout(resolve, 50));
        open();
        const outcomes = await racing;
        expect(executions).toBe(1);
        const winners = outcomes.filter((o) => o.status === 'fulfilled');
        expect(winners).toHaveLength(1);
        const value = winners[0]?.status === 'fulfilled' ? winners[0].value.value : undefined;
        expect(await b.apply(request, () => Promise.resolve('late'))).toEqual({ value, replayed: true, saved: true });
        expect(await a.apply(request, () => Promise.resolve('late'))).toEqual({ value, replayed: true, saved: true });
        expect(executions).toBe(1);
        await b.keepAlive(clientId, 1);
        expect(await a.stats(clientId)).toMatchObject({ storedResponses: 0, inProgress: 0, lowWaterMark: 1 });
      } finally {
        other.disconnect();
      }
    });

    it('puts every key of a session under one hash tag and a real TTL, and leaves the caller’s connection open', async () => {
      const prefix = `${FILE_PREFIX}:keys`;
      const store = createRedisSessionStore({ client, prefix });
      const receiver = createSessionReceiver({ store, clock: new ManualClock(0), leaseMs: 60_000 });
      const clientId = await receiver.register();
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve('x'));
      const keys = await keysUnder(client, `${prefix}:`);
      const tags = new Set(keys.map((key) => /\{[^}]*\}/.exec(key)?.[0]));
      expect(keys.length).toBeGreaterThanOrEqual(2);
      expect(tags.size).toBe(1);
      expect([...tags][0]).toContain(clientId);
      for (const key of keys) expect(await client.pttl(key)).toBeGreaterThan(60_000);
      await store.close();
      expect(await client.ping()).toBe('PONG');
    });

    it('lists client ids holding braces, percent signs and NUL as they were registered', async () => {
      const prefix = `${FILE_PREFIX}:odd`;
      const ids = ['a}{b', '%7D', 'x\u0000y', '%'];
      const store = createRedisSessionStore({ client, prefix });
      const receiver = createSessionReceiver({ store, clock: new ManualClock(0), generateId: () => ids.shift() ?? 'token' });
      for (let i = 0; i < 4; i++) await receiver.register();
      expect((await store.listSessions({ limit: 10 })).map((s) => s.clientId)).toEqual(['%', '%7D', 'a}{b', 'x\u0000y']);
      expect((await store.listSessions({ clientIdPrefix: '%7', limit: 10 })).map((s) => s.clientId)).toEqual(['%7D']);
    });

    it.each<[string, unknown]>([
      ['client', { client: {} }],
      ['prefix', { client, prefix: '' }],
      ['prefix', { client, prefix: 'a{b}' }],
    ])('throws a TypeError naming %s', (name, options) => {
      const make = (): SessionStore => createRedisSessionStore(options as Parameters<typeof createRedisSessionStore>[0]);
      expect(make).toThrow(TypeError);
      expect(make).toThrow(`"${name}"`);
    });
  });
}
