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
