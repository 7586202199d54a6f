/**
 * The runtime SQL of the SQLite store, prepared once per store, and the mapping of rows to records.
 * Parameters are named (`@now`, `@scope` …); every time is integer milliseconds since the epoch.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import type { IdempotencyRecord, RecordDraft } from '../../core/record.js';
import { quoteIdentifier } from './open.js';

// Hot path: docs/hot-path.md#sqlite-statements
/**
 * The select list of a record without its (scope, key): the columns of the record table in the order of
 * {@link FieldValues}. With {@link RECORD_COLUMNS}, the one place the table's column names meet the record's
 * fields; every statement reads a record through one of the two, in raw mode (an array per row: building
 * an object with named properties for each row cost the driver more than the read itself, and each column
 * costs the driver a property store, so a read by primary key does not read back the key it was given).
 */
const FIELD_COLUMNS =
  'fingerprint, state, lease_token, lease_expires_at, recovery_point, response_status, response_headers, response_body, ' +
  'created_at, completed_at, expires_at';

/** The select list of a record with its (scope, key), in the order of {@link RecordValues}. */
const RECORD_COLUMNS = `scope, idempotency_key, ${FIELD_COLUMNS}`;

/** A row of {@link FIELD_COLUMNS} as the driver returns it in raw mode. */
type FieldValues = readonly [
  fingerprint: string,
  state: 'in_progress' | 'completed',
  leaseToken: string,
  leaseExpiresAt: number,
  recoveryPoint: string | null,
  status: number | null,
  headers: string | null,
  body: Buffer | null,
  createdAt: number,
  completedAt: number | null,
  expiresAt: number,
];

/** A row of {@link RECORD_COLUMNS} as the driver returns it in raw mode: the scope, the key, then {@link FieldValues}. */
type RecordValues = readonly [scope: string, key: string, ...fields: FieldValues];

/** A record as {@link RECORD_COLUMNS} reads it; `headers` is JSON text. */
export interface RecordRow {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  readonly state: 'in_progress' | 'completed';
  readonly leaseToken: string;
  readonly leaseExpiresAt: number;
  readonly recoveryPoint: string | null;
  readonly status: number | null;
  readonly headers: string | null;
  readonly body: Buffer | null;
  readonly createdAt: number;
  readonly completedAt: number | null;
  readonly expiresAt: number;
}

/** The prepared statements of one store. */
export interface Statements {
  /** Reads the record of (scope, key), if any. */
  readonly get: (scope: string, key: string) => RecordRow | undefined;
  /**
   * Completes the caller's in_progress record, fenced on its lease token. Returns whether it did (one row
   * changed). Parameters bound by position (cheaper than by name): see {@link CompleteParams}.
   */
  readonly complete: (params: CompleteParams) => boolean;
  /** Deletes the caller's in_progress record, fenced on its lease token. Parameters: scope, key, token. */
  readonly release: Statement<[string, string, string]>;
  /**
   * Deletes at most @limit records whose retention ended at @now, sparing any still under a live lease.
   * Parameters: @now, @limit.
   */
  readonly reap: Statement<[{ now: number; limit: number }]>;
  /**
   * Records a recovery point and renews the lease of the caller's in_progress record, fenced on its lease
   * token; stretches the retention to cover the new lease. Parameters: @scope, @key, @token, @point,
   * @leaseExpiresAt.
   */
  readonly checkpoint: Statement<[CheckpointParams]>;
  /**
   * Renews the lease of the caller's in_progress record, fenced on its lease token, keeping its recovery
   * point; stretches the retention to cover the new lease. Parameters: @scope, @key, @token, @leaseExpiresAt.
   */
  readonly renew: Statement<[RenewParams]>;
  /**
   * Whether the record of (scope, key) is completed under the token: a completion run again. Parameters:
   * scope, key, token. A row when it is.
   */
  readonly completedBy: Statement<[string, string, string], unknown>;
  /**
   * At most @limit in_progress records with a recovery point whose lease ended by @now and whose retention
   * has not, oldest lease expiry first. Parameters: @now, @limit.
   */
  readonly listAbandoned: (params: { now: number; limit: number }) => RecordRow[];
  /**
   * How many in_progress records (at most @limit) have a lease that ended by @now and a retention that
   * has not. Parameters: @now, @limit. Returns one row `{ n }`.
   */
  readonly countExpiredLeases: Statement<[{ now: number; limit: number }], { n: number }>;
  /**
   * One page of records in primary-key (scope, key) order, each filter skipped when its parameter is null.
   * Parameters: @state, @scope, @prefix (key prefix), @afterScope and @afterKey (start after), @limit.
   */
  readonly listRecords: (params: ListRecordsParams) => RecordRow[];
}

interface ListRecordsParams {
  state: string | null;
  scope: string | null;
  prefix: string | null;
  afterScope: string | null;
  afterKey: string | null;
  limit: number;
}

interface RenewParams {
  scope: string;
  key: string;
  token: string;
  leaseExpiresAt: number;
}

interface CheckpointParams {
  scope: string;
  key: string;
  token: string;
  point: string;
  leaseExpiresAt: number;
}

/** What {@link Statements.complete} writes: `headers` is JSON text, `body` the BLOB, times in ms. */
interface CompleteParams {
  scope: string;
  key: string;
  token: string;
  status: number;
  headers: string;
  body: Buffer;
  now: number;
  expiresAt: number;
}

/** Prepares the statements against `table` (already validated and migrated). */
export function prepareStatements(database: Database, table: string): Statements {
  const t = quoteIdentifier(table);
  // Integers stay numbers even on a connection that defaults to BigInt.
  const prepare = <P extends unknown[], R>(sql: string): Statement<P, R> =>
    (database.prepare<P, R>(sql) as Statement<P, R>).safeIntegers(false);
  const records = <P extends unknown[]>(sql: string): Statement<P, RecordValues> => prepare<P, RecordValues>(sql).raw(true);
  const get = prepare<[string, string], FieldValues>(`SELECT ${FIELD_COLUMNS} FROM ${t} WHERE scope = ? AND idempotency_key = ?`).raw(true);
  const complete = prepare<[number, string, Buffer, number, number, string, string, string], unknown>(`
      UPDATE ${t} SET
        state = 'completed',
        response_status = ?,
        response_headers = ?,
        response_body = ?,
        completed_at = ?,
        expires_at = ?
      WHERE scope = ? AND idempotency_key = ? AND state = 'in_progress' AND lease_token = ?`);
  const listAbandoned = records<[{ now: number; limit: number }]>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE state = 'in_progress' AND recovery_point IS NOT NULL AND lease_expires_at <= @now AND expires_at > @now
      ORDER BY lease_expires_at
      LIMIT @limit`);
  const listRecords = records<[ListRecordsParams]>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE (@state IS NULL OR state = @state)
        AND (@scope IS NULL OR scope = @scope)
        AND (@prefix IS NULL OR substr(idempotency_key, 1, length(@prefix)) = @prefix)
        AND (@afterScope IS NULL OR (scope, idempotency_key) > (@afterScope, @afterKey))
      ORDER BY scope, idempotency_key
      LIMIT @limit`);
  return {
    get: (scope, key) => {
      const values = get.get(scope, key);
      return values && fieldsOf(scope, key, values);
    },
    complete: (p) => complete.run(p.status, p.headers, p.body, p.now, p.expiresAt, p.scope, p.key, p.token).changes > 0,
    listAbandoned: (params) => listAbandoned.all(params).map(rowOf),
    listRecords: (params) => listRecords.all(params).map(rowOf),
    release: prepare<[string, string, string], unknown>(
      `DELETE FROM ${t} WHERE scope = ? AND idempotency_key = ? AND state = 'in_progress' AND lease_token = ?`,
    ),
    reap: prepare<[{ now: number; limit: number }], unknown>(`
      DELETE FROM ${t} WHERE rowid IN (
        SELECT rowid FROM ${t}
        WHERE expires_at <= @now AND NOT (state = 'in_progress' AND lease_expires_at > @now)
        LIMIT @limit)`),
    checkpoint: prepare<[CheckpointParams], unknown>(`
      UPDATE ${t} SET
        recovery_point = @point,
        lease_expires_at = @leaseExpiresAt,
        expires_at = MAX(expires_at, @leaseExpiresAt)
      WHERE scope = @scope AND idempotency_key = @key AND state = 'in_progress' AND lease_token = @token`),
    renew: prepare<[RenewParams], unknown>(`
      UPDATE ${t} SET
        lease_expires_at = @leaseExpiresAt,
        expires_at = MAX(expires_at, @leaseExpiresAt)
      WHERE scope = @scope AND idempotency_key = @key AND state = 'in_progress' AND lease_token = @token`),
    completedBy: prepare<[string, string, string], unknown>(
      `SELECT 1 FROM ${t} WHERE scope = ? AND idempotency_key = ? AND state = 'completed' AND lease_token = ?`,
    ),
    countExpiredLeases: prepare<[{ now: number; limit: number }], { n: number }>(`
      SELECT count(*) AS n FROM (
        SELECT 1 FROM ${t}
        WHERE state = 'in_progress' AND lease_expires_at <= @now AND expires_at > @now
        LIMIT @limit)`),
  };
}

/** Names the values of a raw record row (lists only: the copy of the fields costs a read nothing). */
function rowOf(v: RecordValues): RecordRow {
  const [scope, key, ...fields] = v;
  return fieldsOf(scope, key, fields);
}

/** The record of (scope, key) with the values `f`. */
function fieldsOf(scope: string, key: string, f: FieldValues): RecordRow {
  return {
    scope,
    key,
    fingerprint: f[0],
    state: f[1],
    leaseToken: f[2],
    leaseExpiresAt: f[3],
    recoveryPoint: f[4],
    status: f[5],
    headers: f[6],
    body: f[7],
    createdAt: f[8],
    completedAt: f[9],
    expiresAt: f[10],
  };
}

/**
 * Turns a row into a record; the body becomes a plain `Uint8Array` over the bytes the driver copied out of
 * SQLite for this row (a buffer of their own, never a slice of a shared pool), so nothing is copied again.
 */
export function toRecord(row: RecordRow): IdempotencyRecord {
  // One object, its optional fields assigned in place: in V8 11 (Node.js 20) conditional spreads send
  // every record down the slow object-cloning path.
  const record: RecordDraft = {
    scope: row.scope,
    key: row.key,
    fingerprint: row.fingerprint,
    state: row.state,
    leaseToken: row.leaseToken,
    leaseExpiresAt: row.leaseExpiresAt,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
  };
  if (row.recoveryPoint !== null) record.recoveryPoint = row.recoveryPoint;
  if (row.completedAt !== null) record.completedAt = row.completedAt;
  if (row.state === 'completed' && row.status !== null) {
    record.response = {
      status: row.status,
      headers: JSON.parse(row.headers ?? '{}') as Record<string, string>,
      body: row.body === null ? new Uint8Array() : bytesOf(row.body),
    };
  }
  return record;
}

/** A plain `Uint8Array` view of `buffer` when it owns its memory; a copy otherwise. */
function bytesOf(buffer: Buffer): Uint8Array {
  return buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength
    ? new Uint8Array(buffer.buffer, 0, buffer.byteLength)
    : new Uint8Array(buffer);
}
