/**
 * The orders scenario's PostgreSQL side: one schema per run (`retrysafe_orders_<run>`), migrated with
 * retrysafe's tables (idempotency records, inbox, outbox) plus the business tables `orders` and `charges`,
 * and the read-outs the report is built from. Dropped at the end.
 *
 * @module
 */
import type pg from 'pg';
import { migrate } from '../../postgres.js';

/** What the tables say at the end of a run. */
export interface LedgerCounts {
  /** Order rows written. */
  readonly ordersWritten: number;
  /** Idempotency keys with more than one order row (an HTTP retry that executed twice). */
  readonly duplicateOrders: number;
  /** Outbox rows (one per committed order). */
  readonly eventsEnqueued: number;
  /** Outbox rows not yet sent (pending or dead-lettered). */
  readonly eventsUnsent: number;
  /** Charge rows written by the consumer. */
  readonly chargesWritten: number;
  /** Charges beyond the first of an order: sum over orders of (charges − 1) where above 0. */
  readonly doubleCharges: number;
  /** Order rows with no charge. */
  readonly unchargedOrders: number;
  /** Idempotency keys of this run's orders, for matching against the logical orders sent. */
  readonly orderKeys: ReadonlySet<string>;
}

/**
 * Creates the run's schema with retrysafe's migrations and the business tables. `charges.order_id` is
 * deliberately not UNIQUE: the database must not hide a double charge the report is there to count.
 *
 * @throws the driver's error when PostgreSQL refuses
 */
export async function createOrdersSchema(pool: pg.Pool, schema: string): Promise<void> {
  await migrate({ pool, schema });
  await pool.query(`CREATE TABLE "${schema}".orders (
    id text PRIMARY KEY,
    idempotency_key text NOT NULL,
    amount_cents integer NOT NULL,
    currency text NOT NULL,
    created_at bigint NOT NULL)`);
  await pool.query(`CREATE TABLE "${schema}".charges (
    id bigserial PRIMARY KEY,
    order_id text NOT NULL,
    message_id text NOT NULL,
    amount_cents integer NOT NULL)`);
}

/** Drops the run's schema and everything in it. */
export async function dropOrdersSchema(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

/** Progress while waiting for the pipeline to drain: orders, orders charged at least once, unsent events. */
export async function progress(pool: pg.Pool, schema: string): Promise<{ orders: number; charged: number; unsent: number }> {
  const { rows } = await pool.query<{ orders: number; charged: number; unsent: number }>(
    `SELECT (SELECT count(*)::int FROM "${schema}".orders) AS orders,
            (SELECT count(DISTINCT order_id)::int FROM "${schema}".charges) AS charged,
            (SELECT count(*)::int FROM "${schema}".outbox WHERE status <> 1) AS unsent`,
  );
  const row = rows[0];
  if (row === undefined) throw new Error('retrysafe demo: the progress query returned no row');
  return row;
}

/** Reads the final counts. */
export async function countLedger(pool: pg.Pool, schema: string): Promise<LedgerCounts> {
  const s = `"${schema}"`;
  const { rows } = await pool.query<Omit<LedgerCounts, 'orderKeys'>>(
    `SELECT (SELECT count(*)::int FROM ${s}.orders) AS "ordersWritten",
            (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.orders GROUP BY idempotency_key HAVING count(*) > 1) d) AS "duplicateOrders",
            (SELECT count(*)::int FROM ${s}.outbox) AS "eventsEnqueued",
            (SELECT count(*)::int FROM ${s}.outbox WHERE status <> 1) AS "eventsUnsent",
            (SELECT count(*)::int FROM ${s}.charges) AS "chargesWritten",
            (SELECT coalesce(sum(n - 1), 0)::int FROM (SELECT count(*) AS n FROM ${s}.charges GROUP BY order_id) c) AS "doubleCharges",
            (SELECT count(*)::int FROM ${s}.orders o WHERE NOT EXISTS (SELECT 1 FROM ${s}.charges c WHERE c.order_id = o.id)) AS "unchargedOrders"`,
  );
  const keys = await pool.query<{ idempotency_key: string }>(`SELECT DISTINCT idempotency_key FROM ${s}.orders`);
  const row = rows[0];
  if (row === undefined) throw new Error('retrysafe demo: the count query returned no row');
  return { ...row, orderKeys: new Set(keys.rows.map((r) => r.idempotency_key)) };
}
