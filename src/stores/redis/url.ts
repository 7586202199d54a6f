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
 * Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db][?prefix=NAME]`, or `rediss://`
 * for TLS) and returns a store on that connection. `?prefix=NAME` is the store's key prefix (as
 * `options.prefix`); it is taken out of the URL before the driver sees it. Unlike {@link createRedisStore}, the store owns the connection:
 * its `close()` also closes it. The connection fails fast while Redis is down (`enableOfflineQueue: false`,
 * `maxRetriesPerRequest: 1`), so the engine answers `StoreUnavailableError` instead of queueing requests,
 * and reconnects by itself once Redis is back.
 *
 * @param options - the options of {@link createRedisStore} other than the connections
 * @throws TypeError when `url` is not a `redis:` or `rediss:` URL, names an empty `?prefix=` or one other than
 *   `options.prefix`, or an option is invalid
 * @throws the driver's error when the first connection fails, e.g. `connect ECONNREFUSED …` (the connection
 *   is closed first)
 * @throws RedisEvictionPolicyError when the server's `maxmemory-policy` is not `noeviction` and
 *   `allowEvictingPolicy` is not set (the connection is closed first)
 * @example
 * ```ts
 * import { openRedisStore } from 'retrysafe/redis';
 * const store = await openRedisStore('redis://127.0.0.1:6379?prefix=payments');
 * // … later
 * await store.close();
 * ```
 */
export async function openRedisStore(
  url: string,
  options: Omit<RedisStoreOptions, 'client' | 'subscriber'> = {},
): Promise<IdempotencyStore & Pick<Required<IdempotencyStore>, 'kind' | 'waitFor' | 'checkpoint' | 'listAbandoned' | 'ping' | 'countExpiredLeases' | 'listRecords'>> {
  if (typeof url !== 'string' || !/^rediss?:\/\//i.test(url)) throw invalidOption('url', 'a Redis URL starting with redis:// or rediss://', url, 'openRedisStore');
  const [driverUrl, prefix] = takePrefix(url, options.prefix);
  const client = new Redis(driverUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  // Connection errors also reach the commands that fail on them; without a listener ioredis prints each
  // one as an "Unhandled error event". The first one is what a failed connect() is reported with.
  let connectionError: unknown;
  client.on('error', (error: unknown) => {
    connectionError ??= error;
  });
  let store: ReturnType<typeof createRedisStore>;
  try {
    store = createRedisStore({ ...options, ...(prefix !== undefined && { prefix }), client });
    await client.connect();
    // Refuses an evicting maxmemory-policy here, at start, rather than on the first request.
    await store.ping();
  } catch (error) {
    client.disconnect();
    throw connectionError ?? error;
  }
  return closingClient(store, () => client.quit());
}

/**
 * `url` without its `?prefix=` parameters, and the prefix they name (the last one), or `optionsPrefix`.
 * @throws TypeError when the URL's prefix is empty or differs from `optionsPrefix`
 */
function takePrefix(url: string, optionsPrefix: string | undefined): [driverUrl: string, prefix: string | undefined] {
  const query = url.indexOf('?');
  if (query === -1) return [url, optionsPrefix];
  const parameters = new URLSearchParams(url.slice(query + 1));
  const named = parameters.getAll('prefix').at(-1);
  if (named === undefined) return [url, optionsPrefix];
  if (named === '') throw invalidOption('prefix', 'non-empty (the ?prefix= of the URL)', named, 'openRedisStore');
  if (optionsPrefix !== undefined && optionsPrefix !== named) {
    throw invalidOption('prefix', `the ?prefix= of the URL (${JSON.stringify(named)}) or nothing`, optionsPrefix, 'openRedisStore');
  }
  parameters.delete('prefix');
  const rest = parameters.toString();
  return [`${url.slice(0, query)}${rest === '' ? '' : `?${rest}`}`, named];
}
