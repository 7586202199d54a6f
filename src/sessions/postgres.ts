/**
 * The PostgreSQL session store: sessions and their saved responses in `<schema>.sessions` and
 * `<schema>.session_requests`, created by `migrate()` (migration 0005), shared by any number of processes
 * on one database. Every method is one round trip: a single statement, or a call of a function that
 * migration 0005 installs.
 *
 * @module
 */
import type { Pool, QueryResult, QueryResultRow } from 'pg';
import { describe } from '../core/validate.js';
import { DEFAULT_SCHEMA, schemaNames } from '../stores/postgres/schema.js';
import type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionStats, SessionStore, SessionSummary } from './store.js';
import { requireLimit, requireOptions } from '../core/validate.js';

/** Options of {@link createPostgresSessionStore}. */
export interface PostgresSessionStoreOptions {
  /** The caller's `pg` pool; `close()` leaves it open. */
  readonly pool: Pool;
  /**
   * The schema `migrate()` created (it must be at migration 0005 or later). ASCII letters, digits and
   * `_`, not starting with a digit, at most 48 characters; always quoted. @defaultValue 'retrysafe'
   */
  readonly schema?: string;
}

/**
 * The select list of a session: the columns of the sessions table (as `x`) under the field names of
 * {@link SessionStats}. With the counts each statement adds under theirs, the one place the table's column
 * names meet the fields' names.
 */
const SESSION_COLUMNS = 'x.state, x.low_water_mark AS "lowWaterMark", x.lease_expires_at AS "leaseExpiresAt"';

/** What `session_begin()` (migration 0005) returns, its `o_` columns read under {@link BeginResult}'s field names. */
type BeginRow = {
  readonly outcome: 'unknown' | 'expired' | 'stale' | 'execute' | 'replay' | 'in_flight';
  /** `bigint`, which `pg` returns as a string. */
  readonly lowWaterMark: string | null;
  readonly takeover: boolean | null;
  readonly response: string | null;
};

/** A session and its counts as the `stats` statement reads them; `bigint` columns and counts arrive as decimal strings. */
type StatsRow = {
  readonly state: 'live' | 'expired';
  readonly lowWaterMark: string;
  readonly leaseExpiresAt: string;
  readonly storedResponses: string;
  readonly inProgress: string;
};

/** A session as the `listSessions` statement reads it. */
type SummaryRow = StatsRow & {
  readonly clientId: string;
  readonly highestRequestNumber: string | null;
};

/**
 * Creates the PostgreSQL {@link SessionStore}: the session-based Idempotent Receiver of *Patterns of
 * Distributed Systems* with Raft's client sessions (Ongaro's thesis, section 6.3). It creates no tables:
 * run `migrate()` from `retrysafe/postgres` first.
 *
 * Guarantees, across processes: `begin` locks the session row, so N parallel `begin`s of one request
 * number (from any number of pools) yield exactly one `execute`; `complete` and `release` are fenced on
 * the token; `keepAlive` and `begin` raise the low-water mark and delete the requests at or below it in
 * the same round trip, so storage stays bounded by the requests in flight; `reap(now, limit)` deletes at
 * most `limit` sessions and skips rows another transaction holds. Times are milliseconds since the epoch.
 *
 * @throws TypeError naming the option when `pool` is not a pool or `schema` is not acceptable
 * @remarks Methods reject with the driver's error when the database refuses (connection lost, schema not
 *   migrated); the session receiver turns that into a `StoreUnavailableError`.
 * @example
 * ```ts
 * import pg from 'pg';
 * import { migrate } from 'retrysafe/postgres';
 * import { createPostgresSessionStore, createSessionReceiver } from 'retrysafe/sessions';
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate({ pool });
 * const receiver = createSessionReceiver({ store: createPostgresSessionStore({ pool }) });
 * ```
 */
export function createPostgresSessionStore(options: PostgresSessionStoreOptions): SessionStore & Pick<Required<SessionStore>, 'listSessions'> {
  requireOptions('createPostgresSessionStore', options);
  const { pool } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function') {
    throw new TypeError(`retrysafe: option "pool" must be a pg.Pool, got ${describe(pool)}`);
  }
  const { name, quoted } = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA);
  return new PostgresSessionStore(pool, name, quoted);
}

type Method = 'create' | 'begin' | 'complete' | 'release' | 'keepAlive' | 'end' | 'reap' | 'stats' | 'listSessions';

class PostgresSessionStore implements SessionStore {
  private readonly sql: Readonly<Record<Method, string>>;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    s: string,
  ) {
    this.sql = Object.freeze({
      // $1 client id, $2 lease end (ms)
      create: `INSERT INTO ${s}.sessions (client_id, state, lease_expires_at, low_water_mark) VALUES ($1, 'live', $2, 0)
               ON CONFLICT (client_id) DO NOTHING`,
      // $1 client id, $2 request number, $3 low-water mark, $4 now (ms), $5 session lease (ms),
      // $6 execution lease (ms), $7 token
      begin: `SELECT o_outcome AS outcome, o_low_water_mark AS "lowWaterMark", o_takeover AS takeover, o_response AS response
              FROM ${s}.session_begin($1, $2, $3, $4, $5, $6, $7)`,
      // $1 client id, $2 request number, $3 token, $4 response
      complete: `UPDATE ${s}.session_requests SET state = 'completed', response = $4
                 WHERE client_id = $1 AND request_number = $2 AND state = 'in_progress' AND token = $3`,
      // $1 client id, $2 request number, $3 token
      release: `DELETE FROM ${s}.session_requests
                WHERE client_id = $1 AND request_number = $2 AND state = 'in_progress' AND token = $3`,
      // $1 client id, $2 low-water mark, $3 now (ms), $4 lease (ms)
      keepAlive: `SELECT ${s}.session_keep_alive($1, $2, $3, $4) AS result`,
      // $1 client id; the foreign key cascades to its requests
      end: `DELETE FROM ${s}.sessions WHERE client_id = $1`,
      // $1 now (ms), $2 limit. A CTE runs once, so at most $2 rows die; `IN (SELECT … LIMIT … SKIP LOCKED)`
      // may be re-evaluated (a rescan, a recheck after a concurrent update), pick other rows and delete more.
      reap: `WITH doomed AS (
               SELECT client_id FROM ${s}.sessions WHERE lease_expires_at <= $1
               ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
             )
             DELETE FROM ${s}.sessions AS x USING doomed WHERE x.client_id = doomed.client_id`,
      // $1 client id
      stats: `SELECT ${SESSION_COLUMNS},
                     count(r.client_id) FILTER (WHERE r.state = 'completed') AS "storedResponses",
                     count(r.client_id) FILTER (WHERE r.state = 'in_progress') AS "inProgress"
              FROM ${s}.sessions AS x LEFT JOIN ${s}.session_requests AS r ON r.client_id = x.client_id
              WHERE x.client_id = $1 GROUP BY x.client_id`,
      // $1 client-id prefix or null, $2 the previous page's last client id or null, $3 limit. Ordered by
      // bytes (COLLATE "C"), as SQLite and Redis order, whatever the database's collation, through the
      // index of migration 0010: planned with the page's values (see `listSessions`), the prefix and $2
      // become the bounds of its index scan, which stops at the limit.
      listSessions: `SELECT x.client_id AS "clientId", ${SESSION_COLUMNS}, r."storedResponses", r."inProgress", r."highestRequestNumber"
              FROM (SELECT client_id, state, lease_expires_at, low_water_mark FROM ${s}.sessions
                    WHERE ($1::text IS NULL OR starts_with(client_id, $1::text))
                      AND ($2::text IS NULL OR client_id COLLATE "C" > $2::text COLLATE "C")
                    ORDER BY client_id COLLATE "C" LIMIT $3) AS x
              CROSS JOIN LATERAL (
                SELECT count(*) FILTER (WHERE q.state = 'completed') AS "storedResponses",
                       count(*) FILTER (WHERE q.state = 'in_progress') AS "inProgress",
                       max(q.request_number) AS "highestRequestNumber"
                FROM ${s}.session_requests AS q WHERE q.client_id = x.client_id) AS r
              ORDER BY x.client_id COLLATE "C"`,
    });
  }

  async create(clientId: string, now: number, leaseMs: number): Promise<boolean> {
    const result = await this.query('create', [clientId, now + leaseMs]);
    return result.rowCount === 1;
  }

  async begin(input: BeginInput): Promise<BeginResult> {
    const result = await this.query<BeginRow>('begin', [
      input.clientId,
      input.requestNumber,
      input.lowWaterMark,
      input.now,
      input.sessionLeaseMs,
      input.executionLeaseMs,
      input.token,
    ]);
    const row = result.rows[0];
    if (row === undefined) throw new Error('retrysafe: session_begin returned no row');
    switch (row.outcome) {
      case 'stale':
        return { outcome: 'stale', lowWaterMark: Number(row.lowWaterMark) };
      case 'execute':
        return { outcome: 'execute', takeover: row.takeover === true };
      case 'replay':
        return { outcome: 'replay', response: row.response ?? '' };
      default:
        return { outcome: row.outcome };
    }
  }

  async complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean> {
    const result = await this.query('complete', [clientId, requestNumber, token, response]);
    return result.rowCount === 1;
  }

  async release(clientId: string, requestNumber: number, token: string): Promise<boolean> {
    const result = await this.query('release', [clientId, requestNumber, token]);
    return result.rowCount === 1;
  }

  async keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult> {
    const result = await this.query<{ result: KeepAliveResult }>('keepAlive', [clientId, lowWaterMark, now, leaseMs]);
    const row = result.rows[0];
    if (row === undefined) throw new Error('retrysafe: session_keep_alive returned no row');
    return row.result;
  }

  async end(clientId: string): Promise<boolean> {
    const result = await this.query('end', [clientId]);
    return (result.rowCount ?? 0) > 0;
  }

  async reap(now: number, limit: number): Promise<number> {
    const result = await this.query('reap', [now, limit]);
    return result.rowCount ?? 0;
  }

  async stats(clientId: string): Promise<SessionStats | undefined> {
    const result = await this.query<StatsRow>('stats', [clientId]);
    const row = result.rows[0];
    if (row === undefined) return undefined;
    return {
      state: row.state,
      lowWaterMark: Number(row.lowWaterMark),
      leaseExpiresAt: Number(row.leaseExpiresAt),
      storedResponses: Number(row.storedResponses),
      inProgress: Number(row.inProgress),
    };
  }

  async listSessions(query: SessionQuery): Promise<SessionSummary[]> {
    requireLimit('listSessions', query.limit);
    // Unnamed, unlike the other statements, so each page is planned with its own values: a plan cached for
    // any values could not bound the index scan by a prefix or an `after` that may be null, and would read
    // the index from its start on every page.
    const result = await this.pool.query<SummaryRow>(this.sql.listSessions, [query.clientIdPrefix ?? null, query.after ?? null, query.limit]);
    return result.rows.map((row) => ({
      clientId: row.clientId,
      state: row.state,
      lowWaterMark: Number(row.lowWaterMark),
      leaseExpiresAt: Number(row.leaseExpiresAt),
      storedResponses: Number(row.storedResponses),
      inProgress: Number(row.inProgress),
      ...(row.highestRequestNumber !== null && { highestRequestNumber: Number(row.highestRequestNumber) }),
    }));
  }

  /**
   * Runs one statement as a named prepared statement: each connection parses and plans it once. The name
   * carries the schema because two stores on one pool (two schemas) have different texts.
   */
  private query<R extends QueryResultRow = QueryResultRow>(method: Method, values: readonly unknown[]): Promise<QueryResult<R>> {
    return this.pool.query<R>({ name: `rss_${method}_${this.schema}`, text: this.sql[method], values: [...values] });
  }

  /** The pool is the caller's: nothing to release. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
