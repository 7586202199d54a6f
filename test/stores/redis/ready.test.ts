import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { REDIS_URL, redisAvailable, uniqueName } from '../../support/services.js';

const available = await redisAvailable();
const clients: Redis[] = [];

afterEach(() => {
  for (const client of clients.splice(0)) client.disconnect();
});

/** A client set up as docs/redis.md recommends: fail fast while Redis is down. */
function documentedClient(url = REDIS_URL): Redis {
  const client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  clients.push(client);
  return client;
}

describe.runIf(available)('Redis store with the documented client (enableOfflineQueue: false)', () => {
  it('serves the first requests after start, sent before the connection is ready', async () => {
    const client = documentedClient();
    const store = createRedisStore({ client, prefix: uniqueName('rs_ready') });
    const receiver = createReceiver({ store });
    expect(client.status).not.toBe('ready');
    const body = new TextEncoder().encode('ok');
    // Concurrent first requests, as a server gets them the moment it starts listening.
    const executions = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        receiver.execute({ scope: '', key: `first-${i}`, fingerprint: 'f' }, () => Promise.resolve({ status: 201, headers: {}, body })),
      ),
    );
    expect(executions.map((execution) => execution.response.status)).toEqual([201, 201, 201, 201, 201]);
    await store.close();
  });

  it('waits for the connection once for a burst of first requests: one set of listeners, no leak warning', async () => {
    const client = documentedClient();
    const store = createRedisStore({ client, prefix: uniqueName('rs_ready_burst') });
    const receiver = createReceiver({ store });
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(warning);
    };
    process.on('warning', onWarning);
    // ioredis listens for `ready` itself while it connects, but never for `end`: count the store's there.
    const listeners = client.listenerCount('end');
    const body = new TextEncoder().encode('ok');
    const executions = Array.from({ length: 50 }, (_, i) =>
      receiver.execute({ scope: '', key: `burst-${i}`, fingerprint: 'f' }, () => Promise.resolve({ status: 201, headers: {}, body })),
    );
    // Let every request reach its wait before the connection is ready.
    await new Promise((resolve) => setImmediate(resolve));
    expect(client.status).not.toBe('ready');
    expect(client.listenerCount('end')).toBe(listeners + 1);
    const settled = await Promise.all(executions);
    expect(settled.map((execution) => execution.response.status)).toEqual(settled.map(() => 201));
    expect(client.listenerCount('end')).toBe(listeners);
    // A warning is emitted on the next tick after the listener that crossed the limit.
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    expect(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning')).toEqual([]);
    await store.close();
  });

  it('still fails fast, without waiting out the bound, while Redis is down', async () => {
    const client = documentedClient('redis://127.0.0.1:1');
    const store = createRedisStore({ client, readyTimeoutMs: 30_000 });
    const started = performance.now();
    await expect(store.get('', 'k')).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(5_000);
    await store.close();
  });

  it('refuses a readyTimeoutMs that is not a non-negative integer', () => {
    expect(() => createRedisStore({ client: documentedClient(), readyTimeoutMs: -1 })).toThrow(/option "readyTimeoutMs"/);
  });
});
