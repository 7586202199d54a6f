/**
 * The simulation's view of one store: the store itself on an injected clock (or, for PostgreSQL and Redis,
 * on the server's clock), a transactional "effect + completion" step (a real database transaction on
 * PostgreSQL and SQLite; on memory and Redis the effect counts as committed exactly when the fenced
 * `complete` is accepted, which is what transactional mode promises), a crash between the effect and its
 * record, and dropped connections.
 *
 * A harness is opened once per simulation and `reset` before every run (a fresh store over emptied tables,
 * or a fresh key prefix with the previous run's keys deleted), so thousands of seeds reuse one schema, one
 * connection pool and one Redis connection.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { ManualClock, type Clock } from '../../src/core/clock.js';
import type { Claim, StoredResponse } from '../../src/core/record.js';
import type { ClaimResult } from '../../src/core/store.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createPostgresStore, migrate } from '../../src/postgres.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createDynamodbStore, dynamodbTableDefinition } from '../../src/stores/dynamodb/index.js';
import { CreateTableCommand, DeleteTableCommand } from '@aws-sdk/client-dynamodb';
import { startDynamodbLocal } from '../support/dynamodb.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';
import { POSTGRES_URL, REDIS_URL, uniqueName } from '../support/services.js';
import { ProcessClockSkew } from './process-clock.js';
import { boundLeadMs, timeRoundTrips } from './time-round-trips.js';

/** Where a run starts on the injected clock (milliseconds since the epoch). */
export const SIM_EPOCH = 1_700_000_000_000;

/** Thrown inside a transaction to stand for a process that died after its effect, before its record. */
export class SimulatedCrash extends Error {
  override readonly name = 'SimulatedCrash';
}

/** What the simulation drives; one per store backend. */
export interface SimHarness {
  readonly name: string;
  /** The store of the current run. */
  readonly store: IdempotencyStore;
  /** Whether the effect lives in the same database transaction as the record (PostgreSQL, SQLite). */
  readonly realTransactions: boolean;
  /**
   * Whether the store takes "now" from its server (PostgreSQL's `clock_timestamp()`, Redis's `TIME`).
   * Then `advance` moves only this process's clock, which the store must ignore, and `now` reads the
   * server's; else both are the injected clock.
   */
  readonly serverClock: boolean;
  /** The store's "now" in milliseconds: the injected clock, or the server's clock read now. */
  now(): Promise<number>;
  /** Moves the injected clock by `ms` (negative: back); on the server's clock, skews this process's clock. */
  advance(ms: number): void;
  /**
   * On the server's clock only (else rejects): claims (scope, key) through a second store whose clock is
   * pinned at `at` (the server's milliseconds, in the past), so the record's lease and retention are as old
   * as a crashed holder's would be. Fencing tokens of planted claims are `p1`, `p2`, …
   */
  plant(input: { scope: string; key: string; fingerprint: string; leaseMs: number; retentionMs: number }, at: number): Promise<ClaimResult>;
  /** A fresh, empty store for the next run; fencing tokens are `t1`, `t2`, … so a run is reproducible. */
  reset(): Promise<void>;
  /**
   * The handler's effect and the saved response, committed together: resolves `true` when both committed,
   * `false` when the completion was fenced off (then the effect rolled back too).
   */
  commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean>;
  /** The effect written, then the process dies before its record: nothing of it may stay committed. */
  crashAfterEffect(claim: Claim): Promise<void>;
  /** The lease tokens of every committed effect of (scope, key). */
  committedEffects(scope: string, key: string): Promise<string[]>;
  /** Kills the store's server connections (no-op for in-process stores); later calls must recover. */
  dropConnections(): Promise<void>;
  /**
   * How far, in milliseconds, a deadline the store stamps may lie past its duration from the server's time
   * read after the operation (`now`): the lead of the store's bound of the server's clock, for a store that
   * stamps by one (Redis on its server's clock: see `boundLeadMs`); 0 (or absent) for a store that reads
   * the server's clock, or the injected one, as it decides.
   */
  stampLeadMs?(): number;
  close(): Promise<void>;
}

/**
 * Every backend the simulation knows: each store on an injected clock, and PostgreSQL and Redis on their
 * server's clock (`*-server-clock`) with this process's clock jumping.
 */
export const SIM_STORES = ['memory', 'sqlite', 'postgres', 'redis', 'dynamodb', 'postgres-server-clock', 'redis-server-clock'] as const;
export type SimStoreName = (typeof SIM_STORES)[number];

/**
 * Runs the harness's own bookkeeping query until the server answers: after dropped connections the pool
 * may hand out a connection that died before it noticed.
 */
export async function persistently<T>(query: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await query();
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, attempt));
    }
  }
}

function tokens(prefix = 't'): () => string {
  let n = 0;
  return () => `${prefix}${++n}`;
}

/** Options of {@link openHarness}. */
export interface HarnessOptions {
  /**
   * A `*-server-clock` store built on this process's clock (`Date.now`) instead: the defect the server's
   * clock fixes, for the test that shows the simulation catches it.
   */
  readonly storeOnProcessClock?: boolean;
}

/** Opens the harness of one backend. */
export async function openHarness(name: SimStoreName, options: HarnessOptions = {}): Promise<SimHarness> {
  const serverClock = options.storeOnProcessClock === true ? 'process' : 'server';
  switch (name) {
    case 'memory':
      return memoryHarness();
    case 'sqlite':
      return sqliteHarness();
    case 'postgres':
      return postgresHarness(false);
    case 'redis':
      return redisHarness(false);
    case 'dynamodb':
      return dynamodbHarness();
    case 'postgres-server-clock':
      return postgresHarness(true, serverClock);
    case 'redis-server-clock':
      return redisHarness(true, serverClock);
  }
}

/**
 * Where a harness's time comes from: an injected clock it moves, or the server's clock (read through
 * `serverNow`) with this process's clock skewed by `advance`.
 */
abstract class Timekeeper {
  abstract readonly serverClock: boolean;
  clock = new ManualClock(SIM_EPOCH);
  protected readonly skew = new ProcessClockSkew();

  now(): Promise<number> {
    return this.serverClock ? this.serverNow() : Promise.resolve(this.clock.now());
  }

  advance(ms: number): void {
    if (this.serverClock) this.skew.jump(ms);
    else this.clock.advance(ms);
  }

  /** A fresh clock and the process's own clock back, for the next run. */
  protected resetTime(): void {
    this.clock = new ManualClock(SIM_EPOCH);
    this.skew.restore();
  }

  plant(_input: PlantInput, _at: number): Promise<ClaimResult> {
    return Promise.reject(new Error(`${this.constructor.name} has no server clock to plant records by`));
  }

  protected serverNow(): Promise<number> {
    return Promise.reject(new Error(`${this.constructor.name} has no server clock`));
  }
}

/** What {@link SimHarness.plant} claims. */
type PlantInput = Parameters<SimHarness['plant']>[0];

/** Memory and Redis: the effect is committed exactly when the fenced completion is accepted. */
abstract class LedgerHarness extends Timekeeper {
  protected ledger = new Map<string, string[]>();
  abstract readonly store: IdempotencyStore;

  async commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const ok = await this.store.complete(claim, response, retentionMs);
    if (ok) {
      const id = `${claim.scope}\0${claim.key}`;
      this.ledger.set(id, [...(this.ledger.get(id) ?? []), claim.leaseToken]);
    }
    return ok;
  }

  crashAfterEffect(): Promise<void> {
    // The staged effect dies with the process: nothing reaches the ledger.
    return Promise.resolve();
  }

  committedEffects(scope: string, key: string): Promise<string[]> {
    return Promise.resolve(this.ledger.get(`${scope}\0${key}`) ?? []);
  }
}

function memoryHarness(): SimHarness {
  class MemoryHarness extends LedgerHarness implements SimHarness {
    readonly name = 'memory';
    readonly realTransactions = false;
    readonly serverClock = false;
    store: IdempotencyStore = createMemoryStore({ clock: this.clock, generateId: tokens() });
    reset(): Promise<void> {
      this.resetTime();
      this.store = createMemoryStore({ clock: this.clock, generateId: tokens() });
      this.ledger = new Map();
      return Promise.resolve();
    }
    dropConnections(): Promise<void> {
      return Promise.resolve();
    }
    close(): Promise<void> {
      return this.store.close();
    }
  }
  return new MemoryHarness();
}

/**
 * The logical Redis database the simulation runs in (`RETRYSAFE_SIM_REDIS_DB`, default 9): `reap` walks
 * the keys with SCAN, which visits every key of the database whatever the MATCH pattern, so in a database
 * that other suites fill with thousands of keys each reap cost tens of milliseconds of scanning others'.
 */
export const SIM_REDIS_DB = Number(process.env['RETRYSAFE_SIM_REDIS_DB'] ?? 9);

/** What a `*-server-clock` store takes "now" from: its server, or (the defect) this process's clock. */
type StoreTime = 'server' | 'process';

/** The store's `clock` option: the injected clock, none (the server's), or this process's clock. */
function clockOption(serverClock: boolean, storeTime: StoreTime, injected: ManualClock): { clock?: Clock } {
  if (!serverClock) return { clock: injected };
  return storeTime === 'process' ? { clock: { now: () => Date.now() } } : {};
}

async function redisHarness(serverClock: boolean, storeTime: StoreTime = 'server'): Promise<SimHarness> {
  const base = uniqueName('rs_sim');
  // Reconnects at once after a dropped connection (the default backs off for up to 2 s).
  const client = new Redis(REDIS_URL, { db: SIM_REDIS_DB, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => 1 });
  const admin = new Redis(REDIS_URL, { db: SIM_REDIS_DB, lazyConnect: true });
  // Dropped connections are the point: the client reconnects, and its error events must not crash the run.
  client.on('error', () => undefined);
  await Promise.all([client.connect(), admin.connect()]);
  const deleteUnder = async (pattern: string): Promise<void> => {
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await admin.del(...keys);
    } while (cursor !== '0');
  };
  const times = timeRoundTrips(client);
  let run = 0;
  class RedisHarness extends LedgerHarness implements SimHarness {
    readonly name = serverClock ? 'redis-server-clock' : 'redis';
    readonly realTransactions = false;
    readonly serverClock = serverClock;
    private prefix = `${base}:0`;
    private plantTokens = tokens('p');
    store: IdempotencyStore = this.open();
    async reset(): Promise<void> {
      await this.store.close();
      // The previous run's records go now, rather than with their TTL minutes later: they would make every
      // later run's reap scan them.
      await deleteUnder(`${this.prefix}:*`);
      this.resetTime();
      this.prefix = `${base}:${++run}`;
      this.store = this.open();
      this.ledger = new Map();
    }
    override plant(input: PlantInput, at: number): Promise<ClaimResult> {
      // Closed after its one claim: an open store keeps a `ready` listener on the shared client.
      const planter = createRedisStore({ client, prefix: this.prefix, clock: new ManualClock(at), generateId: this.plantTokens });
      return planter.claim(input).finally(() => planter.close());
    }
    private open(): IdempotencyStore {
      this.plantTokens = tokens('p');
      times.restart();
      return createRedisStore({ client, prefix: this.prefix, generateId: tokens(), ...clockOption(serverClock, storeTime, this.clock) });
    }
    stampLeadMs(): number {
      return serverClock && storeTime === 'server' ? boundLeadMs(times) : 0;
    }
    /** On `admin`, which is never dropped: the store's own `TIME`s on `client` are what `times` counts. */
    protected override async serverNow(): Promise<number> {
      const [seconds, micros] = await persistently(() => admin.time());
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    }
    async dropConnections(): Promise<void> {
      const id = await client.client('ID').catch(() => undefined);
      if (id !== undefined) await admin.client('KILL', 'ID', String(id)).catch(() => undefined);
    }
    async close(): Promise<void> {
      this.skew.restore();
      await this.store.close();
      await deleteUnder(`${base}*`);
      client.disconnect();
      await admin.quit();
    }
  }
  return new RedisHarness();
}

/**
 * DynamoDB on a DynamoDB Local this harness starts: a new table per run (TTL off, as the injected clock
 * lies in the real past), the previous one deleted. Like Redis, no transaction: the effect counts as
 * committed exactly when the fenced completion is accepted. Dropping connections destroys the client's
 * sockets; the next request opens new ones.
 */
async function dynamodbHarness(): Promise<SimHarness> {
  const local = await startDynamodbLocal();
  const base = uniqueName('rs_sim');
  let run = 0;
  let client = local.newClient();
  const createTable = async (table: string) => {
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table })));
  };
  await createTable(`${base}_0`);
  class DynamodbHarness extends LedgerHarness implements SimHarness {
    readonly name = 'dynamodb';
    readonly realTransactions = false;
    readonly serverClock = false;
    private table = `${base}_0`;
    /** The run's tokens, kept across a store opened anew on a new client after dropped connections. */
    private generateId = tokens();
    store: IdempotencyStore = this.open();
    async reset(): Promise<void> {
      await this.store.close();
      await local.client.send(new DeleteTableCommand({ TableName: this.table }));
      this.resetTime();
      this.table = `${base}_${++run}`;
      await createTable(this.table);
      this.generateId = tokens();
      this.store = this.open();
      this.ledger = new Map();
    }
    private open(): IdempotencyStore {
      return createDynamodbStore({ client, table: this.table, clock: this.clock, generateId: this.generateId });
    }
    dropConnections(): Promise<void> {
      client.destroy();
      client = local.newClient();
      this.store = this.open();
      return Promise.resolve();
    }
    async close(): Promise<void> {
      await this.store.close();
      await local.stop();
    }
  }
  return new DynamodbHarness();
}

function sqliteHarness(): SimHarness {
  const open = (clock: ManualClock): { database: Database; store: ReturnType<typeof createSqliteStore> } => {
    const database = new BetterSqlite3(':memory:');
    const store = createSqliteStore({ database, clock, generateId: tokens() });
    database.exec('CREATE TABLE sim_effects (scope TEXT NOT NULL, key TEXT NOT NULL, token TEXT NOT NULL)');
    return { database, store };
  };
  class SqliteHarness extends Timekeeper implements SimHarness {
    readonly name = 'sqlite';
    readonly realTransactions = true;
    readonly serverClock = false;
    private opened = open(this.clock);
    get store(): IdempotencyStore {
      return this.opened.store;
    }
    async reset(): Promise<void> {
      await this.close();
      this.resetTime();
      this.opened = open(this.clock);
    }
    commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
      return commitWithEffect(this.opened.store, claim, response, retentionMs, (tx) => {
        tx.prepare('INSERT INTO sim_effects (scope, key, token) VALUES (?, ?, ?)').run(claim.scope, claim.key, claim.leaseToken);
      });
    }
    async crashAfterEffect(claim: Claim): Promise<void> {
      await this.opened.store
        .transaction((tx) => {
          tx.prepare('INSERT INTO sim_effects (scope, key, token) VALUES (?, ?, ?)').run(claim.scope, claim.key, claim.leaseToken);
          return Promise.reject(new SimulatedCrash('died after the effect'));
        })
        .catch((error: unknown) => {
          if (!(error instanceof SimulatedCrash)) throw error;
        });
    }
    committedEffects(scope: string, key: string): Promise<string[]> {
      const rows = this.opened.database.prepare('SELECT token FROM sim_effects WHERE scope = ? AND key = ? ORDER BY rowid').all(scope, key) as { token: string }[];
      return Promise.resolve(rows.map((row) => row.token));
    }
    dropConnections(): Promise<void> {
      return Promise.resolve();
    }
    async close(): Promise<void> {
      await this.opened.store.close();
      if (this.opened.database.open) this.opened.database.close();
    }
  }
  return new SqliteHarness();
}

class FencedOff extends Error {
  override readonly name = 'FencedOff';
}

/**
 * A holder's commit in transactional mode: writes its effect and completes `claim` in one transaction of
 * `store`. Resolves with true when both committed, false when the completion was fenced off (the
 * transaction then rolls back, the effect with it); rejects with the store's own failure.
 */
function commitWithEffect<Tx>(
  store: TransactionalStore<Tx>,
  claim: Claim,
  response: StoredResponse,
  retentionMs: number,
  effect: (tx: Tx) => unknown,
): Promise<boolean> {
  return store
    .transaction(async (tx, view) => {
      await effect(tx);
      if (!(await view.complete(claim, response, retentionMs))) throw new FencedOff();
      return true;
    })
    .catch((error: unknown) => {
      if (error instanceof FencedOff) return false;
      throw error;
    });
}

/** A simulation's own migrated PostgreSQL schema, the pool its stores use, and the fault of dropping that pool's connections. */
export interface SimDatabase {
  readonly schema: string;
  readonly pool: pg.Pool;
  /** Terminates every connection of {@link SimDatabase.pool}, idle or in a transaction. */
  dropConnections(): Promise<void>;
  /** Drops the schema and ends the pools. */
  close(): Promise<void>;
}

/** Creates and migrates a schema named `prefix` plus a unique suffix, with its pools. */
export async function openSimDatabase(prefix: string): Promise<SimDatabase> {
  const schema = uniqueName(prefix);
  const application = schema;
  // synchronous_commit off: no commit waits for its WAL flush. The simulation never crashes the server,
  // so durability across a server crash is not what it checks, and the flush was most of a commit's time.
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4, application_name: application, options: '-c synchronous_commit=off' });
  // Dropped connections are the point: an idle pooled client dying must not crash the run.
  pool.on('error', () => undefined);
  // The connection that drops the others: a pool of one, so that if the shared server ends it too (another
  // suite's fault injection, or a recycled backend pid), it reconnects instead of crashing the run.
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
  admin.on('error', () => undefined);
  await migrate({ pool, schema });
  return {
    schema,
    pool,
    async dropConnections(): Promise<void> {
      await persistently(() => admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [application]));
    },
    async close(): Promise<void> {
      await persistently(() => pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      await pool.end();
      await admin.end();
    },
  };
}

/**
 * The server's "now" as the PostgreSQL store reads it (`SERVER_NOW_MS` of its statements), in
 * milliseconds since the epoch.
 */
const PG_NOW = 'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now';

async function postgresHarness(serverClock: boolean, storeTime: StoreTime = 'server'): Promise<SimHarness> {
  const database = await openSimDatabase('rs_sim');
  const { schema, pool } = database;
  await pool.query(`CREATE TABLE "${schema}".sim_effects (scope text NOT NULL, key text NOT NULL, token text NOT NULL)`);
  class PostgresHarness extends Timekeeper implements SimHarness {
    readonly name = serverClock ? 'postgres-server-clock' : 'postgres';
    readonly realTransactions = true;
    readonly serverClock = serverClock;
    private plantTokens = tokens('p');
    store = this.open();
    async reset(): Promise<void> {
      await this.store.close();
      // DELETE, not TRUNCATE: the tables hold a few rows, and TRUNCATE's new files and exclusive locks made
      // it several times slower than a whole run's other statements.
      await persistently(() => pool.query(`DELETE FROM "${schema}".records; DELETE FROM "${schema}".sim_effects`));
      this.resetTime();
      this.store = this.open();
    }
    override plant(input: PlantInput, at: number): Promise<ClaimResult> {
      const planter = createPostgresStore({ pool, schema, clock: new ManualClock(at), generateId: this.plantTokens });
      return planter.claim(input).finally(() => planter.close());
    }
    private open(): ReturnType<typeof createPostgresStore> {
      this.plantTokens = tokens('p');
      return createPostgresStore({ pool, schema, generateId: tokens(), ...clockOption(serverClock, storeTime, this.clock) });
    }
    protected override async serverNow(): Promise<number> {
      const result = await persistently(() => pool.query<{ now: string }>(PG_NOW));
      return Number(result.rows[0]?.now);
    }
    commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
      return commitWithEffect(this.store, claim, response, retentionMs, async (tx) => {
        await tx.query(`INSERT INTO "${schema}".sim_effects (scope, key, token) VALUES ($1, $2, $3)`, [claim.scope, claim.key, claim.leaseToken]);
      });
    }
    async crashAfterEffect(claim: Claim): Promise<void> {
      await this.store
        .transaction(async (tx) => {
          await tx.query(`INSERT INTO "${schema}".sim_effects (scope, key, token) VALUES ($1, $2, $3)`, [claim.scope, claim.key, claim.leaseToken]);
          // The process dies here: its backend goes away with the open transaction.
          await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
        })
        .catch(() => undefined);
    }
    async committedEffects(scope: string, key: string): Promise<string[]> {
      const result = await persistently(() =>
        pool.query<{ token: string }>(`SELECT token FROM "${schema}".sim_effects WHERE scope = $1 AND key = $2 ORDER BY ctid`, [scope, key]),
      );
      return result.rows.map((row) => row.token);
    }
    dropConnections(): Promise<void> {
      return database.dropConnections();
    }
    async close(): Promise<void> {
      this.skew.restore();
      await this.store.close();
      await database.close();
    }
  }
  return new PostgresHarness();
}
