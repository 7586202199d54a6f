/**
 * The stores the shared HTTP behaviour table runs on. Each test gets a fresh, empty store: the memory
 * store is new per test; PostgreSQL empties the test file's own schema; Redis gives each store its own key
 * prefix under the test file's.
 */
import { Redis } from 'ioredis';
import type { ManualClock } from '../../src/core/clock.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createTestSchema, type TestSchema } from '../support/postgres-schema.js';
import { REDIS_URL, uniqueName } from '../support/services.js';

/** Where one run of the behaviour table keeps its records. */
export interface ScenarioStore {
  /** Shown in the suite's name. */
  readonly name: string;
  /** Runs once before the table (creates a schema, connects). */
  setup?(): Promise<void>;
  /** Runs once after the table (drops what `setup` created, disconnects). */
  teardown?(): Promise<void>;
  /** An empty store on `clock` (the system clock when `undefined`); the table closes it after the test. */
  open(clock: ManualClock | undefined): Promise<IdempotencyStore>;
}

export const memoryScenarioStore: ScenarioStore = {
  name: 'memory',
  open: (clock) => Promise.resolve(createMemoryStore(clock ? { clock } : {})),
};

/** PostgreSQL on a schema `<prefix>_<pid>_<random>` of its own, emptied before every test. */
export function postgresScenarioStore(prefix: string): ScenarioStore {
  let db: TestSchema | undefined;
  const schema = (): TestSchema => {
    if (!db) throw new Error('postgresScenarioStore: setup() has not run');
    return db;
  };
  return {
    name: 'PostgreSQL',
    async setup() {
      db = await createTestSchema(prefix);
    },
    async teardown() {
      await db?.drop();
    },
    async open(clock) {
      const { pool, schema: name } = schema();
      await schema().truncate();
      return createPostgresStore({ pool, schema: name, ...(clock && { clock }) });
    },
  };
}

/** Redis on one connection, each store under a key prefix `<prefix>_<pid>_<random>:<n>`; the keys are deleted afterwards. */
export function redisScenarioStore(prefix: string): ScenarioStore {
  const root = uniqueName(prefix);
  const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  let stores = 0;
  return {
    name: 'Redis',
    async setup() {
      await client.connect();
    },
    async teardown() {
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', `${root}:*`, 'COUNT', 500);
        cursor = next;
        if (keys.length > 0) await client.del(...keys);
      } while (cursor !== '0');
      await client.quit();
    },
    open(clock) {
      return Promise.resolve(createRedisStore({ client, prefix: `${root}:${++stores}`, ...(clock && { clock }) }));
    },
  };
}
