/**
 * The runtime SQL of the SQLite store, prepared once per store, and the mapping of rows to records.
 * Parameters are named (`@now`, `@scope` …); every time is integer milliseconds since the epoch.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import type { IdempotencyRecord } from '../../core/record.js';
import { quoteIdentifier } from './open.js';

/**
 * The select list of a record: each column of the record table as the field of {@link RecordRow} it fills.
 * The one place the table's column names meet the record's field names; every statement reads a record
 * through it.
 */
const RECORD_COLUMNS =
  'scope, idempotency_key AS "key", fingerprint, state, lease_token AS "leaseToken", lease_expires_at AS "leaseExpiresAt", ' +
  'recovery_point AS "recoveryPoint", response_status AS "status", response_headers AS "headers", response_body AS "body", ' +
  'created_at AS "createdAt", completed_at AS "completedAt", expires_at AS "expiresAt"';

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
  /** Parameters: scope, key. */
  readonly get: Statement<[string, string], RecordRow>;
  /**
   * Completes the caller's in_progress record, fenced on its lease token; one change when it did.
   * Parameters: @scope, @key, @token, @status, @headers (JSON), @body (BLOB), @now, @expiresAt.
   */
  readonly complete: Statement<[CompleteParams]>;
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
   * At most @limit in_progress records with a recovery point whose lease ended by @now and whose retention
   * has not, oldest lease expiry first. Parameters: @now, @limit.
   */
  readonly listAbandoned: Statement<[{ now: number; limit: number }], RecordRow>;
  /**
   * How many in_progress records (at most @limit) have a lease that ended by @now and a retention that
   * has not. Parameters: @now, @limit. Returns one row `{ n }`.
   */
  readonly countExpiredLeases: Statement<[{ now: number; limit: number }], { n: number }>;
  /**
   * One page of records in primary-key (scope, key) order, each filter skipped when its parameter is null.
   * Parameters: @state, @scope, @prefix (key prefix), @afterScope and @afterKey (start after), @limit.
   */
  readonly listRecords: Statement<[ListRecordsParams], RecordRow>;
}

interface ListRecordsParams {
  state: string | null;
  scope: string | null;
  prefix: string | null;
  afterScope: string | null;
  afterKey: string | null;
  limit: number;
}

interface CheckpointParams {
  scope: string;
  key: string;
  token: string;
  point: string;
  leaseExpiresAt: number;
}

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
  return {
    get: prepare<[string, string], RecordRow>(`SELECT ${RECORD_COLUMNS} FROM ${t} WHERE scope = ? AND idempotency_key = ?`),
    complete: prepare<[CompleteParams], unknown>(`
      UPDATE ${t} SET
        state = 'completed',
        response_status = @status,
        response_headers = @headers,
        response_body = @body,
        completed_at = @now,
        expires_at = @expiresAt
      WHERE scope = @scope AND idempotency_key = @key AND state = 'in_progress' AND lease_token = @token`),
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
    listAbandoned: prepare<[{ now: number; limit: number }], RecordRow>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE state = 'in_progress' AND recovery_point IS NOT NULL AND lease_expires_at <= @now AND expires_at > @now
      ORDER BY lease_expires_at
      LIMIT @limit`),
    countExpiredLeases: prepare<[{ now: number; limit: number }], { n: number }>(`
      SELECT count(*) AS n FROM (
        SELECT 1 FROM ${t}
        WHERE state = 'in_progress' AND lease_expires_at <= @now AND expires_at > @now
        LIMIT @limit)`),
    listRecords: prepare<[ListRecordsParams], RecordRow>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE (@state IS NULL OR state = @state)
        AND (@scope IS NULL OR scope = @scope)
        AND (@prefix IS NULL OR substr(idempotency_key, 1, length(@prefix)) = @prefix)
        AND (@afterScope IS NULL OR (scope, idempotency_key) > (@afterScope, @afterKey))
      ORDER BY scope, idempotency_key
      LIMIT @limit`),
  };
}

/**
 * Turns a row into a record; the body becomes a plain `Uint8Array` over the bytes the driver copied out of
 * SQLite for this row (a buffer of their own, never a slice of a shared pool), so nothing is copied again.
 */
export function toRecord(row: RecordRow): IdempotencyRecord {
  return {
    scope: row.scope,
    key: row.key,
    fingerprint: row.fingerprint,
    state: row.state,
    leaseToken: row.leaseToken,
    leaseExpiresAt: row.leaseExpiresAt,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
    ...(row.recoveryPoint !== null && { recoveryPoint: row.recoveryPoint }),
    ...(row.completedAt !== null && { completedAt: row.completedAt }),
    ...(row.state === 'completed' &&
      row.status !== null && {
        response: {
          status: row.status,
          headers: JSON.parse(row.headers ?? '{}') as Record<string, string>,
          body: row.body === null ? new Uint8Array() : bytesOf(row.body),
        },
      }),
  };
}

/** A plain `Uint8Array` view of `buffer` when it owns its memory; a copy otherwise. */
function bytesOf(buffer: Buffer): Uint8Array {
  return buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength
    ? new Uint8Array(buffer.buffer, 0, buffer.byteLength)
    : new Uint8Array(buffer);
}
