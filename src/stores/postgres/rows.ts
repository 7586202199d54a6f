/**
 * Turns rows of the records table into the engine's records. The one place the table's column names meet
 * the record's field names: every statement reads a record through {@link RECORD_COLUMNS}, which renames
 * each column to its field, so the TypeScript side names each field once, as `IdempotencyRecord` does.
 *
 * @module
 */
import type { IdempotencyRecord, RecordDraft } from '../../core/record.js';
import { decodeToken } from './codec.js';

/**
 * The select list of a record: each column of the records table (or of `claim()`'s result, which has the
 * same names) as the field of {@link RecordRow} it fills.
 */
export const RECORD_COLUMNS =
  'fingerprint, lease_token AS "leaseToken", lease_expires_at AS "leaseExpiresAt", created_at AS "createdAt", ' +
  'expires_at AS "expiresAt", completed_at AS "completedAt", status, headers, body, recovery_point AS "recoveryPoint"';

/**
 * A record as {@link RECORD_COLUMNS} reads it and node-postgres returns it: `bigint` columns arrive as
 * decimal strings, `json` parsed, `bytea` as a Buffer. The claim's `read_or_insert()` returns the
 * times inside a JSON array, so as numbers (`claim.ts`).
 */
export interface RecordRow {
  readonly fingerprint: Buffer;
  readonly leaseToken: Buffer;
  readonly leaseExpiresAt: string | number;
  readonly createdAt: string | number;
  readonly expiresAt: string | number;
  readonly completedAt: string | number | null;
  readonly status: number | null;
  readonly headers: Record<string, string> | null;
  readonly body: Buffer | null;
  /** The last recovery point of a multi-phase operation (migration 0004), or null. */
  readonly recoveryPoint: string | null;
}

/** A records row that names its own (scope, key), as `listAbandoned` reads it. */
export interface KeyedRecordRow extends RecordRow {
  readonly scope: string;
  readonly key: string;
}

/** A record's columns other than its two tokens, as {@link RecordRow} holds them. */
type RecordFields = Omit<RecordRow, 'fingerprint' | 'leaseToken'>;

/** Builds the engine's record from a row of (scope, key). */
export function toRecord(scope: string, key: string, row: RecordRow): IdempotencyRecord {
  return recordOf(scope, key, decodeToken(row.fingerprint), decodeToken(row.leaseToken), row);
}

/** Builds the engine's record of (scope, key) from its decoded `fingerprint` and `leaseToken` and its other columns. */
export function recordOf(scope: string, key: string, fingerprint: string, leaseToken: string, row: RecordFields): IdempotencyRecord {
  // Hot path: docs/hot-path.md#postgresql-rows-and-queries
  // One object, its fields assigned in place: in V8 11 (Node.js 20), spreading a record into a new object
  // with more fields cost about 3 µs per record here.
  const record: RecordDraft = {
    scope,
    key,
    fingerprint,
    state: 'in_progress',
    leaseToken,
    leaseExpiresAt: Number(row.leaseExpiresAt),
    createdAt: Number(row.createdAt),
    expiresAt: Number(row.expiresAt),
  };
  if (row.recoveryPoint !== null) record.recoveryPoint = row.recoveryPoint;
  if (row.completedAt === null || row.status === null) return record;
  record.state = 'completed';
  record.completedAt = Number(row.completedAt);
  record.response = {
    status: row.status,
    headers: row.headers ?? {},
    // A copy (one memcpy; a small one from Node's buffer pool), so callers never hold a view into the
    // driver's socket buffer. `new Uint8Array(bytes)` would allocate an ArrayBuffer each time: slower.
    body: row.body === null ? new Uint8Array() : Buffer.from(row.body),
  };
  return record;
}

/** Builds the engine's record from a row that names its own (scope, key). */
export function toKeyedRecord(row: KeyedRecordRow): IdempotencyRecord {
  return toRecord(row.scope, row.key, row);
}
