/**
 * Turns rows of the records table into the engine's records.
 *
 * @module
 */
import type { IdempotencyRecord } from '../../core/record.js';
import { decodeToken } from './codec.js';

/**
 * A records row as node-postgres returns it: `bigint` columns arrive as decimal strings, `json` parsed,
 * `bytea` as a Buffer.
 */
export interface RecordRow {
  readonly fingerprint: Buffer;
  readonly lease_token: Buffer;
  readonly lease_expires_at: string;
  readonly created_at: string;
  readonly expires_at: string;
  readonly completed_at: string | null;
  readonly status: number | null;
  readonly headers: Record<string, string> | null;
  readonly body: Buffer | null;
  /** The last recovery point of a multi-phase operation (migration 0004), or null. */
  readonly recovery_point: string | null;
}

/** A records row that names its own (scope, key), as `listAbandoned` reads it. */
export interface KeyedRecordRow extends RecordRow {
  readonly scope: string;
  readonly key: string;
}

/** Builds the engine's record from a row of (scope, key). */
export function toRecord(scope: string, key: string, row: RecordRow): IdempotencyRecord {
  const base = {
    scope,
    key,
    fingerprint: decodeToken(row.fingerprint),
    leaseToken: decodeToken(row.lease_token),
    leaseExpiresAt: Number(row.lease_expires_at),
    createdAt: Number(row.created_at),
    expiresAt: Number(row.expires_at),
    ...(row.recovery_point !== null && { recoveryPoint: row.recovery_point }),
  };
  if (row.completed_at === null || row.status === null) return { ...base, state: 'in_progress' };
  return {
    ...base,
    state: 'completed',
    completedAt: Number(row.completed_at),
    response: {
      status: row.status,
      headers: row.headers ?? {},
      // A plain Uint8Array copy, so callers never hold a view into the driver's Buffer pool.
      body: Uint8Array.from(row.body ?? []),
    },
  };
}

/** Builds the engine's record from a row that names its own (scope, key). */
export function toKeyedRecord(row: KeyedRecordRow): IdempotencyRecord {
  return toRecord(row.scope, row.key, row);
}
