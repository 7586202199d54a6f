/**
 * What is particular to a node-redis client (`createClient()` of `redis`) under the Redis store: the first
 * requests wait for a connection still being set up, a client whose Redis is down fails fast, the
 * subscriber the store opens for `waitFor` is closed with it, the commands of one turn leave in one socket
 * write (node-redis's own batching: the store corks nothing there), and a node-redis Cluster is refused by name.
 * The contract runs here over RESP2; over RESP3 (node-redis's default), and the counted claim and completion,
 * in store.test.ts, set-claim.test.ts and completion-notice.test.ts.
 */
import { Socket } from 'node:net';
import { createClient, createCluster } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { redisContractFixtures } from '../../support/redis.js';
import { startPrivateRedis } from '../../support/redis-server.js';
import { uniqueName } from '../../support/services.js';
import { storeContract } from '../contract.js';

const server = await startPrivateRedis([]);
afterAll(() => server?.stop());

if (server !== undefined) {
  // node-redis 6 speaks RESP3 by default (the contract runs so in store.test.ts); RESP2 replies differ in shape.
  const resp2 = createClient({ url: `redis://127.0.0.1:${server.port}`, RESP: 2, disableOfflineQueue: true });
  resp2.on('error', () => undefined);
  await resp2.connect();
  afterAll(() => resp2.destroy());
  storeContract('redis on node-redis over RESP2', redisContractFixtures(resp2, 'resp2'));
}

const body = new TextEncoder().encode('ok');

/**
 * Counts what the sockets to `port` hand the kernel from now on (one `_writev` for a corked batch, one
 * `_write` per lone chunk): node-redis keeps its socket private, so the count is taken on `Socket`'s
 * prototype. Returns a reader of the count so far and the undo.
 */
function countWritesTo(port: number): { writes(): number; restore(): void } {
  const prototype = Socket.prototype as unknown as Record<'_write' | '_writev', (this: Socket, ...args: unknown[]) => unknown>;
  const originals = { _write: prototype._write, _writev: prototype._writev };
  let writes = 0;
  for (const method of ['_write', '_writev'] as const) {
    prototype[method] = function (this: Socket, ...args: unknown[]) {
      if (this.remotePort === port) writes++;
      return originals[method].apply(this, args);
    };
  }
  return { writes: () => writes, restore: () => Object.assign(prototype, originals) };
}

describe.runIf(server !== undefined)('Redis store on a node-redis client', () => {
  it('serves the first requests after start, sent before the client (disableOfflineQueue: true) is ready', async () => {
    const client = createClient({ url: `redis://127.0.0.1:${server!.port}`, disableOfflineQueue: true });
    client.on('error', () => undefined);
    const connecting = client.connect();
    const store = createRedisStore({ client, prefix: uniqueName('rs_nr_ready') });
    const receiver = createReceiver({ store });
    expect(client.isReady).toBe(false);
    const executions = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        receiver.execute({ scope: '', key: `first-${i}`, fingerprint: 'f' }, () => Promise.resolve({ status: 201, headers: {}, body })),
      ),
    );
    expect(executions.map((execution) => execution.response.status)).toEqual([201, 201, 201, 201, 201]);
    await connecting;
    await store.close();
    await client.close();
  });

  it('still fails fast, without waiting out the bound, while Redis is down', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:1', disableOfflineQueue: true });
    client.on('error', () => undefined);
    client.connect().catch(() => undefined);
    const store = createRedisStore({ client, readyTimeoutMs: 30_000 });
    const started = performance.now();
    await expect(store.get('', 'k')).rejects.toThrow();
    await expect(store.get('', 'k')).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(5_000);
    await store.close();
    client.destroy();
  });

  it('opens one subscriber connection for waitFor, wakes the waiter on close and closes that connection', async () => {
    const admin = await server!.connect();
    const pubsubClients = async (): Promise<number> => ((await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string).split('\n').filter(Boolean).length;
    const client = await server!.connectNodeRedis();
    const store = createRedisStore({ client, prefix: uniqueName('rs_nr_sub') });
    const won = await store.claim({ scope: 's', key: 'k', fingerprint: 'f', leaseMs: 30_000, retentionMs: 60_000 });
    expect(won.acquired).toBe(true);
    const waiters = [store.waitFor('s', 'k', 30_000), store.waitFor('s', 'k', 30_000)];
    for (let i = 0; i < 200 && (await pubsubClients()) === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await pubsubClients()).toBe(1);
    const started = performance.now();
    await store.close();
    const records = await Promise.all(waiters);
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(records.map((record) => record?.state)).toEqual(['in_progress', 'in_progress']);
    for (let i = 0; i < 200 && (await pubsubClients()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await pubsubClients()).toBe(0);
    // The client itself stays open: the caller owns it.
    expect(client.isReady).toBe(true);
  });

  it('sends the commands of one turn of the event loop in one socket write, each with its own answer', async () => {
    const client = await server!.connectNodeRedis();
    const store = createRedisStore({ client, prefix: uniqueName('rs_nr_batch') });
    // The store's first operation reads the server's eviction policy first; count from after it.
    await store.ping();
    const counter = countWritesTo(server!.port);
    try {
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const input = (key: string) => ({ scope: 's', key, fingerprint: 'f', leaseMs: 30_000, retentionMs: 60_000 });
      const claims = await Promise.all(keys.map((key) => store.claim(input(key))));
      expect(counter.writes()).toBe(1);
      expect(claims.map((result) => result.acquired)).toEqual(keys.map(() => true));
      expect(new Set(claims.map((result) => (result.acquired ? result.claim.leaseToken : ''))).size).toBe(20);
      const before = counter.writes();
      const again = await Promise.all(keys.map((key) => store.claim(input(key))));
      expect(counter.writes() - before).toBe(1);
      expect(again.map((result) => result.acquired)).toEqual(keys.map(() => false));
    } finally {
      counter.restore();
    }
    await store.close();
  });

  it('refuses a node-redis Cluster with a TypeError naming the option and pointing at ioredis', () => {
    const cluster = createCluster({ rootNodes: [{ url: `redis://127.0.0.1:${server!.port}` }] });
    expect(() => createRedisStore({ client: cluster as never })).toThrow(TypeError);
    expect(() => createRedisStore({ client: cluster as never })).toThrow(/option "client" must be an ioredis Cluster for Redis Cluster/);
    const client = createClient();
    expect(() => createRedisStore({ client, subscriber: cluster as never })).toThrow(/option "subscriber" must be an ioredis Cluster/);
  });
});
