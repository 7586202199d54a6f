/**
 * Opening a Redis store from a URL, with a connection the store owns (for the CLI's `--store redis://…`).
 *
 * @module
 */
import { Redis } from 'ioredis';
import { invalidOption } from '../../core/validate.js';
import { closingClient, type IdempotencyStore } from '../../core/store.js';
import { createRedisStore, type RedisStoreOptions } from './factory.js';

/**
 * Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS) and
 * returns a store on that connection. Unlike {@link createRedisStore}, the store owns the connection:
 * its `close()` also closes it. The connection fails fast while Redis is down (`enableOfflineQueue: false`,
 * `maxRetriesPerRequest: 1`), so the engine answers `StoreUnavailableError` instead of queueing requests,
 * and reconnects by itself once Redis is back.
 *
 * @param options - the options of {@link createRedisStore} other than the connections
 * @throws TypeError when `url` is not a `redis:` or `rediss:` URL, or an option is invalid
 * @throws the driver's error when the first connection fails, e.g. `connect ECONNREFUSED …` (the connection
 *   is closed first)
 * @throws RedisEvictionPolicyError when the server's `maxmemory-policy` is not `noeviction` and
 *   `allowEvictingPolicy` is not set (the connection is closed first)
 * @example
 * ```ts
 * import { openRedisStore } from 'retrysafe/redis';
 * const store = await openRedisStore('redis://127.0.0.1:6379', { prefix: 'payments' });
 * // … later
 * await store.close();
 * ```
 */
export async function openRedisStore(
  url: string,
  options: Omit<RedisStoreOptions, 'client' | 'subscriber'> = {},
): Promise<IdempotencyStore & Pick<Required<IdempotencyStore>, 'kind' | 'waitFor' | 'checkpoint' | 'listAbandoned' | 'ping' | 'countExpiredLeases' | 'listRecords'>> {
  if (typeof url !== 'string' || !/^rediss?:\/\//i.test(url)) throw invalidOption('url', 'a Redis URL starting with redis:// or rediss://', url, 'openRedisStore');
  const client = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  // Connection errors also reach the commands that fail on them; without a listener ioredis prints each
  // one as an "Unhandled error event". The first one is what a failed connect() is reported with.
  let connectionError: unknown;
  client.on('error', (error: unknown) => {
    connectionError ??= error;
  });
  let store: ReturnType<typeof createRedisStore>;
  try {
    store = createRedisStore({ ...options, client });
    await client.connect();
    // Refuses an evicting maxmemory-policy here, at start, rather than on the first request.
    await store.ping();
  } catch (error) {
    client.disconnect();
    throw connectionError ?? error;
  }
  return closingClient(store, () => client.quit());
}
