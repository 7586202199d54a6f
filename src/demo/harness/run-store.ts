/**
 * Where a demo run keeps its idempotency records (and, on PostgreSQL, its charges): the `--store` the user
 * named, narrowed to a namespace of the run's own, so runs on one server never see each other and nothing
 * of a run is left behind. PostgreSQL: schema `retrysafe_demo_<run>` (dropped at the end); Redis: key
 * prefix `retrysafe_demo_<run>` (its keys deleted at the end). A SQLite or memory store is left as named:
 * the default SQLite file lives in the run's temporary directory, which the run removes.
 *
 * @module
 */
import { parseStoreUrl, redactUrl, StoreOpenError, type StoreTarget } from '../../store-url.js';

/** The run's share of a store: the URL its processes open, and how to remove what they wrote. */
interface RunStore {
  /** The `--store` value the run's processes open (the run's schema or prefix set in it). */
  readonly url: string;
  /** What the run writes outside its temporary directory, e.g. `schema retrysafe_demo_1a2b3c4d`. */
  readonly created: readonly string[];
  /**
   * Opens the store once in the run's namespace (`'create'`: the PostgreSQL schema is created and
   * migrated), so a store that cannot be reached fails here, before any process starts.
   * @throws {@link StoreOpenError} when the store cannot be reached or refuses
   */
  prepare(): Promise<void>;
  /**
   * Removes the run's namespace: drops the PostgreSQL schema, deletes the Redis keys under the prefix.
   * Resolves at once for a store with nothing outside the temporary directory.
   * @throws the driver's error when the server refuses (unless {@link prepare} failed: then nothing is thrown)
   */
  remove(): Promise<void>;
}

/**
 * The run's share of `store`.
 *
 * @throws {@link StoreUrlError} when `store` is not a valid `--store` value
 * @throws TypeError when `store` names a schema (`?schema=`) or a key prefix (`?prefix=`): the run uses its own
 */
export function runStore(store: string, runId: string): RunStore {
  const target = parseStoreUrl(store);
  const namespace = `retrysafe_demo_${runId}`;
  let prepared = false;
  const prepare = async (url: string): Promise<void> => {
    const opened = await parseStoreUrl(url).open('create').catch((error: unknown) => {
      // Named as the user wrote it: the run's own ?schema= or ?prefix= is no part of what to check.
      if (!(error instanceof StoreOpenError)) throw error;
      throw new StoreOpenError(error.message.replaceAll(redactUrl(url), redactUrl(store)), { cause: error.cause });
    });
    await opened.store.close();
    prepared = true;
  };
  const removing = (remove: () => Promise<void>) => async (): Promise<void> => {
    await remove().catch((error: unknown) => {
      if (prepared) throw error;
    });
  };
  switch (target.scheme) {
    case 'postgres':
    case 'postgresql': {
      const url = withParameter(store, 'schema', namespace);
      return { url, created: [`schema ${namespace}`], prepare: () => prepare(url), remove: removing(() => dropSchema(target, namespace)) };
    }
    case 'redis':
    case 'rediss': {
      const url = withParameter(store, 'prefix', namespace);
      return { url, created: [`Redis keys ${namespace}:*`], prepare: () => prepare(url), remove: removing(() => deleteKeys(target, namespace)) };
    }
    default:
      return { url: store, created: [], prepare: () => prepare(store), remove: () => Promise.resolve() };
  }
}

/** `url` with `?name=value` added. @throws TypeError when `url` already holds `name` */
function withParameter(url: string, name: string, value: string): string {
  const parsed = new URL(url);
  if (parsed.searchParams.has(name)) {
    throw new TypeError(`retrysafe: the demo keeps its records under ${value}, a ${name} of its own: drop ?${name}= from --store`);
  }
  parsed.searchParams.set(name, value);
  return parsed.toString();
}

async function dropSchema(target: StoreTarget, schema: string): Promise<void> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: target.driverUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** Deletes every key under `prefix` (the records and their companion keys), SCANning in batches. */
async function deleteKeys(target: StoreTarget, prefix: string): Promise<void> {
  const { Redis } = await import('ioredis');
  // No reconnecting: a server that cannot be reached fails the removal at once instead of keeping the
  // process alive with a client that retries for ever.
  const client = new Redis(target.driverUrl, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    for await (const keys of client.scanStream({ match: `${prefix}:*`, count: 500 }) as AsyncIterable<string[]>) {
      if (keys.length > 0) await client.unlink(...keys);
    }
    await client.quit();
  } finally {
    client.disconnect();
  }
}
