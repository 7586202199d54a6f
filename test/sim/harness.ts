/**
 * The simulation's view of one store: the store itself on an injected clock, a transactional "effect +
 * completion" step (a real database transaction on PostgreSQL and SQLite; on memory and Redis the effect
 * counts as committed exactly when the fenced `complete` is accepted, which is what transactional mode
 * promises), a crash between the effect and its record, and dropped connections.
 *
 * A harness is opened once per simulation and `reset` before every run (a fresh store, empty tables or a
 * fresh key prefix), so thousands of seeds reuse one connection pool.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { ManualClock } from '../../src/core/clock.js';
import type { Claim, StoredResponse } from '../../src/core/record.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createPostgresStore, migrate } from '../../src/postgres.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { POSTGRES_URL, REDIS_URL, uniqueName } from '../support/services.js';

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
  readonly clock: ManualClock;
  /** Whether the effect lives in the same database transaction as the record (PostgreSQL, SQLite). */
  readonly realTransactions: boolean;
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
  close(): Promise<void>;
}

/** Every backend the simulation knows. */
export const SIM_STORES = ['memory', 'sqlite', 'postgres', 'redis'] as const;
export type SimStoreName = (typeof SIM_STORES)[number];

/**
 * Runs the harness's own bookkeeping query until the server answers: after dropped connections the pool
 * may hand out a connection that died before it noticed.
 */
async function persistently<T>(query: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await query();
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, attempt));
    }
  }
}

function tokens(): () => string {
  let n = 0;
  return () => `t${++n}`;
}

/** Opens the harness of one backend. */
export async function openHarness(name: SimStoreName): Promise<SimHarness> {
  switch (name) {
    case 'memory':
      return memoryHarness();
    case 'sqlite':
      return sqliteHarness();
    case 'postgres':
      return postgresHarness();
    case 'redis':
      return redisHarness();
  }
}

/** Memory and Redis: the effect is committed exactly when the fenced completion is accepted. */
abstract class LedgerHarness {
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
    clock = new ManualClock(SIM_EPOCH);
    store: IdempotencyStore = createMemoryStore({ clock: this.clock, generateId: tokens() });
    reset(): Promise<void> {
      this.clock = new ManualClock(SIM_EPOCH);
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

async function redisHarness(): Promise<SimHarness> {
  const base = uniqueName('rs_sim');
  // Reconnects at once after a dropped connection (the default backs off for up to 2 s).
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => 1 });
  const admin = new Redis(REDIS_URL, { lazyConnect: true });
  // Dropped connections are the point: the client reconnects, and its error events must not crash the run.
  client.on('error', () => undefined);
  await Promise.all([client.connect(), admin.connect()]);
  let run = 0;
  class RedisHarness extends LedgerHarness implements SimHarness {
    readonly name = 'redis';
    readonly realTransactions = false;
    clock = new ManualClock(SIM_EPOCH);
    store: IdempotencyStore = createRedisStore({ client, prefix: `${base}:0`, clock: this.clock, generateId: tokens() });
    async reset(): Promise<void> {
      await this.store.close();
      this.clock = new ManualClock(SIM_EPOCH);
      this.store = createRedisStore({ client, prefix: `${base}:${++run}`, clock: this.clock, generateId: tokens() });
      this.ledger = new Map();
    }
    async dropConnections(): Promise<void> {
      const id = await client.client('ID').catch(() => undefined);
      if (id !== undefined) await admin.client('KILL', 'ID', String(id)).catch(() => undefined);
    }
    async close(): Promise<void> {
      await this.store.close();
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${base}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) await admin.del(...keys);
      } while (cursor !== '0');
      client.disconnect();
      await admin.quit();
    }
  }
  return new RedisHarness();
}

function sqliteHarness(): SimHarness {
  const open = (clock: ManualClock): { database: Database; store: ReturnType<typeof createSqliteStore> } => {
    const database = new BetterSqlite3(':memory:');
    const store = createSqliteStore({ database, clock, generateId: tokens() });
    database.exec('CREATE TABLE sim_effects (scope TEXT NOT NULL, key TEXT NOT NULL, token TEXT NOT NULL)');
    return { database, store };
  };
  class SqliteHarness implements SimHarness {
    readonly name = 'sqlite';
    readonly realTransactions = true;
    clock = new ManualClock(SIM_EPOCH);
    private opened = open(this.clock);
    get store(): IdempotencyStore {
      return this.opened.store;
    }
    async reset(): Promise<void> {
      await this.close();
      this.clock = new ManualClock(SIM_EPOCH);
      this.opened = open(this.clock);
    }
    commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
      return this.opened.store
        .transaction(async (tx, view) => {
          tx.prepare('INSERT INTO sim_effects (scope, key, token) VALUES (?, ?, ?)').run(claim.scope, claim.key, claim.leaseToken);
          if (!(await view.complete(claim, response, retentionMs))) throw new FencedOff();
          return true;
        })
        .catch((error: unknown) => {
          if (error instanceof FencedOff) return false;
          throw error;
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

async function postgresHarness(): Promise<SimHarness> {
  const schema = uniqueName('rs_sim');
  const application = schema;
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4, application_name: application });
  // Dropped connections are the point: an idle pooled client dying must not crash the run.
  pool.on('error', () => undefined);
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await migrate({ pool, schema });
  await pool.query(`CREATE TABLE "${schema}".sim_effects (scope text NOT NULL, key text NOT NULL, token text NOT NULL)`);
  const make = (clock: ManualClock) => createPostgresStore({ pool, schema, clock, generateId: tokens() });
  class PostgresHarness implements SimHarness {
    readonly name = 'postgres';
    readonly realTransactions = true;
    clock = new ManualClock(SIM_EPOCH);
    store = make(this.clock);
    async reset(): Promise<void> {
      await this.store.close();
      await persistently(() => pool.query(`TRUNCATE "${schema}".records, "${schema}".sim_effects`));
      this.clock = new ManualClock(SIM_EPOCH);
      this.store = make(this.clock);
    }
    commit(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
      return this.store
        .transaction(async (tx, view) => {
          await tx.query(`INSERT INTO "${schema}".sim_effects (scope, key, token) VALUES ($1, $2, $3)`, [claim.scope, claim.key, claim.leaseToken]);
          if (!(await view.complete(claim, response, retentionMs))) throw new FencedOff();
          return true;
        })
        .catch((error: unknown) => {
          if (error instanceof FencedOff) return false;
          throw error;
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
    async dropConnections(): Promise<void> {
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [application]);
    }
    async close(): Promise<void> {
      await this.store.close();
      await persistently(() => pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      await pool.end();
      await admin.end();
    }
  }
  return new PostgresHarness();
}
