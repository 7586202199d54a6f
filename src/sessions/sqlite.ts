/**
 * The SQLite session store (`better-sqlite3`): sessions and their saved responses in two tables of one
 * database file, shared by any number of processes. Each operation is one synchronous `BEGIN IMMEDIATE`
 * transaction, so it is atomic within the process and across processes on the same file.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import { systemClock, type Clock } from '../core/clock.js';
import { describe, requireDurationMs } from '../core/validate.js';
import { attempt } from '../stores/sqlite/attempt.js';
import { openSqlite } from '../stores/sqlite/open.js';
import { sessionsSqliteSchema } from './migrations/sqlite.js';
import type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionStats, SessionStore, SessionSummary } from './store.js';
import { requireClock, requireLimit, requireOptions } from '../core/validate.js';
import { requireSqliteSource } from '../stores/sqlite/source.js';

/** Options of {@link createSqliteSessionStore}. */
export interface SqliteSessionStoreOptions {
  /** Database file to open (created when missing; WAL journal mode), or `':memory:'`. Absent when `database` is given. @defaultValue ':memory:' */
  readonly path?: string;
  /**
   * A `better-sqlite3` connection to use instead of opening one; left open by `close()`. Give the session
   * store a connection of its own (the same file is fine): a connection that another store holds inside
   * an open transaction would pull the session writes into that transaction.
   */
  readonly database?: Database;
  /**
   * Name of the sessions table; requests live in `<table>_requests` and the migration ledger in
   * `<table>_migrations`. Letters, digits and underscores, at most 40 characters. @defaultValue 'retrysafe_sessions'
   */
  readonly table?: string;
  /** How long a write waits for another process's lock before failing with `SQLITE_BUSY`. @defaultValue 5_000 */
  readonly busyTimeoutMs?: number;
  /**
   * Time source of the migration ledger, which records when each schema step was applied (ms since the
   * epoch). The sessions' own times come with each call, from the session receiver's clock.
   * @defaultValue the system clock
   */
  readonly clock?: Clock;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/**
 * Creates the SQLite {@link SessionStore}, creating or upgrading its tables idempotently under a
 * migration ledger.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the file cannot be opened or migrated
 * @throws SchemaTooNewError (`store-schema-too-new`) when a newer retrysafe migrated the tables (downgrading is not supported)
 * @example
 * ```ts
 * import { createSessionReceiver, createSqliteSessionStore } from 'retrysafe/sessions';
 * const receiver = createSessionReceiver({ store: createSqliteSessionStore({ path: './sessions.db' }) });
 * ```
 */
export function createSqliteSessionStore(options: SqliteSessionStoreOptions = {}): SessionStore & Pick<Required<SessionStore>, 'listSessions'> {
  requireOptions('createSqliteSessionStore', options);
  const source = requireSqliteSource(options.path, options.database);
  const table = options.table === undefined ? 'retrysafe_sessions' : options.table;
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new TypeError(`retrysafe: option "table" must be an identifier of letters, digits and underscores (at most 40), got ${describe(table)}`);
  }
  const busyTimeoutMs = requireDurationMs('busyTimeoutMs', options.busyTimeoutMs === undefined ? 5_000 : options.busyTimeoutMs);
  const clock = requireClock(options.clock ?? systemClock);
  const opening = { source, busyTimeoutMs, migrate: true, schema: sessionsSqliteSchema(table), clock };
  return openSqlite(opening, (db, owned) => new SqliteSessionStore(db, owned, table));
}

/**
 * The select list of a session: the columns of the sessions table (as `x`) under the field names of
 * {@link SessionStats}. With {@link REQUEST_COUNTS}, the one place the tables' column names meet the
 * fields' names.
 */
const SESSION_COLUMNS = 'x.state, x.low_water_mark AS "lowWaterMark", x.lease_expires_at AS "leaseExpiresAt"';

/** The counts of a session's requests, under {@link SessionStats}'s field names (the requests as `r`). */
const REQUEST_COUNTS =
  `coalesce(sum(r.state = 'completed'), 0) AS "storedResponses", coalesce(sum(r.state = 'in_progress'), 0) AS "inProgress"`;

/** A session as {@link SESSION_COLUMNS} reads it. */
interface SessionRow {
  readonly state: 'live' | 'expired';
  readonly leaseExpiresAt: number;
  readonly lowWaterMark: number;
}

/** A session's request counts as {@link REQUEST_COUNTS} reads them. */
interface CountsRow {
  readonly storedResponses: number;
  readonly inProgress: number;
}

/** A session as the `listSessions` statement reads it. */
interface SummaryRow extends SessionRow, CountsRow {
  readonly clientId: string;
  readonly highestRequestNumber: number | null;
}

/** A request as the `selectRequest` statement reads it. */
interface RequestRow {
  readonly state: 'in_progress' | 'completed';
  readonly leaseExpiresAt: number;
  readonly response: string | null;
}

class SqliteSessionStore implements SessionStore {
  private readonly sql: Record<
    | 'insertSession'
    | 'selectSession'
    | 'expireSession'
    | 'renewSession'
    | 'deleteSession'
    | 'deleteRequests'
    | 'deleteRequestsUpTo'
    | 'selectRequest'
    | 'upsertRequest'
    | 'completeRequest'
    | 'releaseRequest'
    | 'selectExpired'
    | 'countRequests'
    | 'listSessions',
    Statement
  >;
  private readonly beginTx: (input: BeginInput) => BeginResult;
  private readonly keepAliveTx: (clientId: string, lowWaterMark: number, now: number, leaseMs: number) => KeepAliveResult;
  private readonly endTx: (clientId: string) => boolean;
  private readonly reapTx: (now: number, limit: number) => number;

  constructor(
    private readonly db: Database,
    private readonly owned: boolean,
    table: string,
  ) {
    const sessions = `"${table}"`;
    const requests = `"${table}_requests"`;
    this.sql = {
      insertSession: db.prepare(
        `INSERT INTO ${sessions} (client_id, state, lease_expires_at, low_water_mark) VALUES (?, 'live', ?, 0) ON CONFLICT (client_id) DO NOTHING`,
      ),
      selectSession: db.prepare(`SELECT ${SESSION_COLUMNS} FROM ${sessions} AS x WHERE x.client_id = ?`),
      expireSession: db.prepare(`UPDATE ${sessions} SET state = 'expired' WHERE client_id = ?`),
      renewSession: db.prepare(
        `UPDATE ${sessions} SET low_water_mark = max(low_water_mark, ?), lease_expires_at = max(lease_expires_at, ?) WHERE client_id = ?`,
      ),
      deleteSession: db.prepare(`DELETE FROM ${sessions} WHERE client_id = ?`),
      deleteRequests: db.prepare(`DELETE FROM ${requests} WHERE client_id = ?`),
      deleteRequestsUpTo: db.prepare(`DELETE FROM ${requests} WHERE client_id = ? AND request_number <= ?`),
      selectRequest: db.prepare(
        `SELECT state, lease_expires_at AS "leaseExpiresAt", response FROM ${requests} WHERE client_id = ? AND request_number = ?`,
      ),
      upsertRequest: db.prepare(
        `INSERT INTO ${requests} (client_id, request_number, state, token, lease_expires_at) VALUES (?, ?, 'in_progress', ?, ?)
         ON CONFLICT (client_id, request_number) DO UPDATE SET state = 'in_progress', token = excluded.token, lease_expires_at = excluded.lease_expires_at, response = NULL`,
      ),
      completeRequest: db.prepare(
        `UPDATE ${requests} SET state = 'completed', response = ? WHERE client_id = ? AND request_number = ? AND state = 'in_progress' AND token = ?`,
      ),
      releaseRequest: db.prepare(
        `DELETE FROM ${requests} WHERE client_id = ? AND request_number = ? AND state = 'in_progress' AND token = ?`,
      ),
      selectExpired: db.prepare(`SELECT client_id FROM ${sessions} WHERE lease_expires_at <= ? LIMIT ?`).pluck(),
      countRequests: db.prepare(`SELECT ${REQUEST_COUNTS} FROM ${requests} AS r WHERE r.client_id = ?`),
      // The page first (primary-key order, LIMIT), then the counters of its sessions only.
      listSessions: db.prepare(
        `SELECT x.client_id AS "clientId", ${SESSION_COLUMNS}, ${REQUEST_COUNTS}, max(r.request_number) AS "highestRequestNumber"
         FROM (SELECT * FROM ${sessions}
               WHERE (@prefix IS NULL OR substr(client_id, 1, length(@prefix)) = @prefix) AND (@after IS NULL OR client_id > @after)
               ORDER BY client_id LIMIT @limit) AS x
         LEFT JOIN ${requests} AS r ON r.client_id = x.client_id
         GROUP BY x.client_id ORDER BY x.client_id`,
      ),
    };
    const begin = db.transaction((input: BeginInput): BeginResult => {
      const session = this.live(input.clientId, input.now);
      if (typeof session === 'string') return { outcome: session };
      if (input.requestNumber <= session.lowWaterMark) return { outcome: 'stale', lowWaterMark: session.lowWaterMark };
      this.advance(input.clientId, session, input.lowWaterMark, input.now + input.sessionLeaseMs);
      const entry = this.sql.selectRequest.get(input.clientId, input.requestNumber) as RequestRow | undefined;
      if (entry?.state === 'completed') return { outcome: 'replay', response: entry.response ?? '' };
      if (entry && entry.leaseExpiresAt > input.now) return { outcome: 'in_flight' };
      this.sql.upsertRequest.run(input.clientId, input.requestNumber, input.token, input.now + input.executionLeaseMs);
      return { outcome: 'execute', takeover: entry !== undefined };
    });
    this.beginTx = (input) => begin.immediate(input);
    const keepAlive = db.transaction((clientId: string, lowWaterMark: number, now: number, leaseMs: number): KeepAliveResult => {
      const session = this.live(clientId, now);
      if (typeof session === 'string') return session;
      this.advance(clientId, session, lowWaterMark, now + leaseMs);
      return 'ok';
    });
    this.keepAliveTx = (clientId, lowWaterMark, now, leaseMs) => keepAlive.immediate(clientId, lowWaterMark, now, leaseMs);
    const end = db.transaction((clientId: string): boolean => {
      this.sql.deleteRequests.run(clientId);
      return this.sql.deleteSession.run(clientId).changes > 0;
    });
    this.endTx = (clientId) => end.immediate(clientId);
    const reap = db.transaction((now: number, limit: number): number => {
      const ids = this.sql.selectExpired.all(now, limit) as string[];
      for (const clientId of ids) {
        this.sql.deleteRequests.run(clientId);
        this.sql.deleteSession.run(clientId);
      }
      return ids.length;
    });
    this.reapTx = (now, limit) => reap.immediate(now, limit);
  }

  create(clientId: string, now: number, leaseMs: number): Promise<boolean> {
    return attempt(() => this.sql.insertSession.run(clientId, now + leaseMs).changes === 1);
  }

  begin(input: BeginInput): Promise<BeginResult> {
    return attempt(() => this.beginTx(input));
  }

  complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean> {
    return attempt(() => this.sql.completeRequest.run(response, clientId, requestNumber, token).changes === 1);
  }

  release(clientId: string, requestNumber: number, token: string): Promise<boolean> {
    return attempt(() => this.sql.releaseRequest.run(clientId, requestNumber, token).changes === 1);
  }

  keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult> {
    return attempt(() => this.keepAliveTx(clientId, lowWaterMark, now, leaseMs));
  }

  end(clientId: string): Promise<boolean> {
    return attempt(() => this.endTx(clientId));
  }

  reap(now: number, limit: number): Promise<number> {
    return attempt(() => this.reapTx(now, limit));
  }

  stats(clientId: string): Promise<SessionStats | undefined> {
    return attempt(() => {
      const session = this.sql.selectSession.get(clientId) as SessionRow | undefined;
      if (!session) return undefined;
      const counts = this.sql.countRequests.get(clientId) as CountsRow;
      return {
        state: session.state,
        lowWaterMark: session.lowWaterMark,
        leaseExpiresAt: session.leaseExpiresAt,
        storedResponses: counts.storedResponses,
        inProgress: counts.inProgress,
      };
    });
  }

  listSessions(query: SessionQuery): Promise<SessionSummary[]> {
    return attempt(() => {
      requireLimit('listSessions', query.limit);
      const rows = this.sql.listSessions.all({ prefix: query.clientIdPrefix ?? null, after: query.after ?? null, limit: query.limit }) as SummaryRow[];
      return rows.map((row) => ({
        clientId: row.clientId,
        state: row.state,
        lowWaterMark: row.lowWaterMark,
        leaseExpiresAt: row.leaseExpiresAt,
        storedResponses: row.storedResponses,
        inProgress: row.inProgress,
        ...(row.highestRequestNumber !== null && { highestRequestNumber: row.highestRequestNumber }),
      }));
    });
  }

  close(): Promise<void> {
    if (this.owned && this.db.open) this.db.close();
    return Promise.resolve();
  }

  /** The live session row, or why there is none; an expired one becomes a tombstone on the way. */
  private live(clientId: string, now: number): SessionRow | 'unknown' | 'expired' {
    const session = this.sql.selectSession.get(clientId) as SessionRow | undefined;
    if (!session) return 'unknown';
    if (session.state === 'expired') return 'expired';
    if (session.leaseExpiresAt <= now) {
      this.sql.expireSession.run(clientId);
      this.sql.deleteRequests.run(clientId);
      return 'expired';
    }
    return session;
  }

  private advance(clientId: string, session: SessionRow, lowWaterMark: number, leaseExpiresAt: number): void {
    this.sql.renewSession.run(lowWaterMark, leaseExpiresAt, clientId);
    if (lowWaterMark > session.lowWaterMark) this.sql.deleteRequestsUpTo.run(clientId, lowWaterMark);
  }
}
