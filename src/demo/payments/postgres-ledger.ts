/**
 * The charges table on PostgreSQL, in the schema of the demo run (`retrysafe_demo_<run id>`, where the run's
 * idempotency records live too), so runs on one database never see each other's rows and the user creates
 * nothing by hand; the demo's parent drops the schema at the end (`harness/run-store.ts`). In transactional mode
 * each row is written through the request's `pg` `PoolClient`, inside the transaction that also completes
 * the idempotency record.
 *
 * @module
 */
import type pg from 'pg';
import { chargeOf, type Charge, type ChargeLedger, type ChargeRow } from './ledger.js';

/** Run ids are what `run.ts` makes: lower-case hex, so the schema name needs no escaping beyond quotes. */
const RUN_ID = /^[0-9a-f]{1,32}$/;

/**
 * The per-run charges table on a `pg` pool.
 *
 * @example
 * ```ts
 * const ledger = await PostgresChargeLedger.open(store.pool, '1a2b3c4d');
 * await store.transaction((tx) => ledger.insert(charge, tx));
 * ```
 */
export class PostgresChargeLedger implements ChargeLedger<pg.PoolClient> {
  private constructor(
    private readonly pool: pg.Pool,
    /** `"retrysafe_demo_<run id>".charges`, quoted. */
    private readonly table: string,
  ) {}

  /**
   * Creates the run's schema and table when missing (a restarted server finds them again) and returns the
   * ledger. The pool stays its owner's.
   *
   * @throws TypeError when `runId` is not 1–32 lower-case hex digits
   * @throws the driver's error when PostgreSQL refuses
   */
  static async open(pool: pg.Pool, runId: string): Promise<PostgresChargeLedger> {
    if (!RUN_ID.test(runId)) throw new TypeError(`retrysafe: the demo run id must be 1-32 lower-case hex digits, got ${JSON.stringify(runId)}`);
    const schema = `"retrysafe_demo_${runId}"`;
    const table = `${schema}.charges`;
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    // Deliberately not UNIQUE on idempotency_key: see ledger.ts.
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${table} (
        id text PRIMARY KEY,
        idempotency_key text,
        amount_cents integer NOT NULL,
        currency text NOT NULL,
        created_at bigint NOT NULL
      )`,
    );
    return new PostgresChargeLedger(pool, table);
  }

  async insert(charge: Charge, tx: pg.PoolClient | undefined): Promise<void> {
    // $1 id, $2 idempotency key, $3 amount in cents, $4 currency, $5 created at (ms since the epoch)
    await (tx ?? this.pool).query(`INSERT INTO ${this.table} (id, idempotency_key, amount_cents, currency, created_at) VALUES ($1, $2, $3, $4, $5)`, [
      charge.id,
      charge.idempotencyKey,
      charge.amountCents,
      charge.currency,
      charge.createdAt,
    ]);
  }

  async find(id: string): Promise<Charge | undefined> {
    // $1 payment id
    const { rows } = await this.pool.query<ChargeRow>(`SELECT * FROM ${this.table} WHERE id = $1`, [id]);
    const row = rows[0];
    return row && chargeOf(row);
  }

  async list(keyPrefix: string): Promise<Charge[]> {
    // $1 key prefix; starts_with, not LIKE, so `_` and `%` in a key are plain characters.
    const { rows } = await this.pool.query<ChargeRow>(`SELECT * FROM ${this.table} WHERE starts_with(idempotency_key, $1) ORDER BY created_at, id`, [keyPrefix]);
    return rows.map(chargeOf);
  }

  /** Nothing to release: the pool is its owner's, and the demo's parent drops the run's schema once the server is gone. */
  dispose(): Promise<void> {
    return Promise.resolve();
  }
}
