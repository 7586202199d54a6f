/**
 * The charges table on SQLite (`better-sqlite3`): on the SQLite store's own connection in transactional
 * mode, or in a file of its own next to a plain store.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import { chargeOf, type Charge, type ChargeLedger, type ChargeRow } from './ledger.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS demo_charges (
  id TEXT PRIMARY KEY,
  idempotency_key TEXT,
  amount_cents INTEGER NOT NULL,
  currency TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
-- Deliberately not UNIQUE: see ledger.ts.
CREATE INDEX IF NOT EXISTS demo_charges_by_key ON demo_charges (idempotency_key);
`;

const INSERT = 'INSERT INTO demo_charges (id, idempotency_key, amount_cents, currency, created_at) VALUES (?, ?, ?, ?, ?)';

/**
 * The `demo_charges` table on a `better-sqlite3` connection; transactions hand out that same kind of
 * connection (the SQLite store's, inside `BEGIN IMMEDIATE`).
 *
 * @example
 * ```ts
 * const store = createSqliteStore({ path: 'payments.db' });
 * const ledger = new SqliteChargeLedger(store.database);
 * ```
 */
export class SqliteChargeLedger implements ChargeLedger<Database> {
  private readonly insertRow: Statement<[string, string | null, number, string, number]>;
  private readonly findRow: Statement<[string], ChargeRow>;
  private readonly listRows: Statement<[{ length: number; prefix: string }], ChargeRow>;

  /**
   * Creates the table and its (non-unique) key index when missing.
   *
   * @param owned - close `database` on {@link dispose} (a connection the ledger alone uses)
   */
  constructor(
    readonly database: Database,
    private readonly owned = false,
  ) {
    database.exec(SCHEMA);
    this.insertRow = database.prepare(INSERT);
    this.findRow = database.prepare('SELECT * FROM demo_charges WHERE id = ?');
    // substr, not LIKE: LIKE ignores ASCII case, and keys are case-sensitive.
    this.listRows = database.prepare(
      'SELECT * FROM demo_charges WHERE substr(idempotency_key, 1, @length) = @prefix ORDER BY created_at, id',
    );
  }

  insert(charge: Charge, tx: Database | undefined): Promise<void> {
    const statement = tx === undefined || tx === this.database ? this.insertRow : tx.prepare<[string, string | null, number, string, number]>(INSERT);
    statement.run(charge.id, charge.idempotencyKey, charge.amountCents, charge.currency, charge.createdAt);
    return Promise.resolve();
  }

  find(id: string): Promise<Charge | undefined> {
    const row = this.findRow.get(id);
    return Promise.resolve(row && chargeOf(row));
  }

  list(keyPrefix: string): Promise<Charge[]> {
    return Promise.resolve(this.listRows.all({ length: keyPrefix.length, prefix: keyPrefix }).map(chargeOf));
  }

  dispose(): Promise<void> {
    if (this.owned) this.database.close();
    return Promise.resolve();
  }
}
