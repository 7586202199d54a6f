/**
 * The demo's business table: one row per charge, behind one interface whatever database holds it (see
 * `sqlite-ledger.ts`, `postgres-ledger.ts`). The idempotency key is stored in each row but is deliberately
 * NOT unique — if it were, the database rather than retrysafe would be what stops a double charge.
 * Counting keys with more than one row is how the demo detects double charges.
 *
 * @module
 */

/** One charge row. */
export interface Charge {
  /** Payment id, e.g. `pay_…`; what the API answers. */
  readonly id: string;
  /** The Idempotency-Key of the request that wrote the row (`null` when it carried none). */
  readonly idempotencyKey: string | null;
  /** Amount in integer minor units (cents). */
  readonly amountCents: number;
  /** ISO 4217 code. */
  readonly currency: string;
  /** When the row was written, in milliseconds since the epoch. */
  readonly createdAt: number;
}

/** A row of the charges table as a driver returns it (`created_at` is a `bigint`, a string from `pg`). */
export interface ChargeRow {
  readonly id: string;
  readonly idempotency_key: string | null;
  readonly amount_cents: number;
  readonly currency: string;
  readonly created_at: number | string;
}

/** The charge a row holds. */
export function chargeOf(row: ChargeRow): Charge {
  return {
    id: row.id,
    idempotencyKey: row.idempotency_key,
    amountCents: row.amount_cents,
    currency: row.currency,
    createdAt: Number(row.created_at),
  };
}

/** The read side of the charges table, which the demo's parent asks for at the end of a run. */
export interface ChargeReader {
  /** The charge with this payment id, or `undefined`. Rejects with the driver's error. */
  find(id: string): Promise<Charge | undefined>;
  /** Every charge whose key starts with `keyPrefix` (case-sensitively), oldest first. */
  list(keyPrefix: string): Promise<Charge[]>;
  /** Removes what the ledger created for this run alone (if anything) and releases what it opened itself. */
  dispose(): Promise<void>;
}

/**
 * The charges table.
 *
 * @typeParam Tx - the transaction handle of the idempotency store whose transactions the rows can join
 */
export interface ChargeLedger<Tx> extends ChargeReader {
  /**
   * Writes a charge. Pass `tx` — the request's transaction handle in transactional mode — so the row
   * commits or rolls back with the idempotency record; with `undefined` the row commits on its own.
   */
  insert(charge: Charge, tx: Tx | undefined): Promise<void>;
}
