/**
 * Helpers shared by the Redis store's test files, on one server or on a Cluster.
 */
import { ManualClock } from '../../src/core/clock.js';
import type { RedisConnection } from '../../src/stores/redis/connection.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { LuaScript } from '../../src/stores/redis/script.js';
import { scanKeys, transportOf } from '../../src/stores/redis/transport.js';
import type { ContractFixture } from '../stores/contract.js';

/** `DEL KEYS[1]` as a script, so it runs on either driver's client (and on the key's master on Cluster). */
const DEL = new LuaScript("return redis.call('DEL', KEYS[1])");

/** Every key under `prefix` on every master, found with SCAN (never KEYS: the server is shared). */
export async function keysUnder(client: RedisConnection, prefix: string): Promise<string[]> {
  const found: string[] = [];
  for await (const keys of scanKeys(transportOf(client), `${prefix}*`, 500)) found.push(...keys);
  return found;
}

/** Deletes every key under `prefix` on every master (one DEL per key: a multi-key DEL must stay in one slot). */
export async function deleteUnder(client: RedisConnection, prefix: string): Promise<void> {
  const transport = transportOf(client);
  for await (const keys of scanKeys(transport, `${prefix}*`, 500)) await Promise.all(keys.map((key) => DEL.run(transport, [key], [])));
}

/** The store contract's fixtures on `client`: each test a fresh prefix under `filePrefix`, deleted after it. */
export function redisContractFixtures(client: RedisConnection, filePrefix: string): () => Promise<ContractFixture> {
  let tests = 0;
  return () => {
    const prefix = `${filePrefix}:c${++tests}`;
    const clock = new ManualClock(1_700_000_000_000);
    const store = createRedisStore({ client, prefix, clock });
    return Promise.resolve({
      store,
      clock,
      close: async () => {
        await store.close();
        await deleteUnder(client, prefix);
      },
    });
  };
}

/**
 * Counts what `stream` (a connection's socket) hands the kernel from now on: one `_writev` for a corked
 * batch, one `_write` per lone chunk. Returns a reader of the count so far.
 */
export function countSocketWrites(stream: object): () => number {
  const socket = stream as Record<'_write' | '_writev', (...args: unknown[]) => unknown>;
  let writes = 0;
  for (const method of ['_write', '_writev'] as const) {
    const original = socket[method].bind(socket);
    socket[method] = (...args: unknown[]) => {
      writes++;
      return original(...args);
    };
  }
  return () => writes;
}
