/**
 * The SQLite claim: one upsert, so processes sharing the file get exactly one winner. A record that the
 * upsert would leave standing (a replay, a live lease, another fingerprint) is answered from a plain read
 * first: a read needs no write lock, and the upsert would only have returned the same row. Otherwise the
 * upsert runs as a statement of its own: in autocommit mode SQLite takes the write lock when the statement
 * starts (waiting for it up to `busy_timeout`, as `BEGIN IMMEDIATE` would) and commits when it ends, so
 * the statement is atomic. Only when it does not win (another process changed the record between the read
 * and the upsert) does the claim run again under `BEGIN IMMEDIATE` (a savepoint inside an open
 * transaction), where the upsert and the read of the record that refused it see one state.
 *
 * The upsert inserts an in_progress record, or takes over the existing one when its retention expired (a
 * new record, any fingerprint, no recovery point) or its lease expired under the same fingerprint
 * (created_at and the recovery point are kept); otherwise it returns the standing record unchanged, except
 * to its owner: a claim presenting the standing in-progress record's lease token (and fingerprint) again
 * wins with the lease unchanged.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { claimOf } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { quoteIdentifier } from './open.js';
import { toRecord, type RecordRow, type Statements } from './statements.js';

/** Claims `input` at `now` (ms) under `leaseToken`. Throws the driver's error (e.g. `SQLITE_BUSY`). */
export type SqliteClaim = (input: ClaimInput, now: number, leaseToken: string) => ClaimResult;

/** What the upsert returns when the caller won: its created_at and recovery point, in raw mode. */
type ClaimedRow = readonly [createdAt: number, recoveryPoint: string | null];

/** Prepares the claim against `table` (already validated and migrated); `sql.get` reads a refusing record. */
export function prepareClaim(database: Database, table: string, sql: Pick<Statements, 'get'>): SqliteClaim {
  const t = quoteIdentifier(table);
  // Parameters by position (scope, key, fingerprint, token, lease expiry, now, retention end), cheaper to
  // bind than by name; in the update, excluded.created_at is now.
  const upsert = database
    .prepare<[string, string, string, string, number, number, number], ClaimedRow>(
      `
      INSERT INTO ${t} AS r (scope, idempotency_key, fingerprint, state, lease_token, lease_expires_at,
                             created_at, expires_at)
      VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?)
      ON CONFLICT (scope, idempotency_key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        state = 'in_progress',
        lease_token = excluded.lease_token,
        lease_expires_at = excluded.lease_expires_at,
        recovery_point = CASE WHEN r.expires_at <= excluded.created_at THEN NULL ELSE r.recovery_point END,
        response_status = NULL,
        response_headers = NULL,
        response_body = NULL,
        created_at = CASE WHEN r.expires_at <= excluded.created_at THEN excluded.created_at ELSE r.created_at END,
        completed_at = NULL,
        expires_at = excluded.expires_at
      WHERE r.expires_at <= excluded.created_at
         OR (r.state = 'in_progress' AND r.lease_expires_at <= excluded.created_at AND r.fingerprint = excluded.fingerprint)
      RETURNING created_at, recovery_point`,
    )
    // Integers stay numbers even on a connection that defaults to BigInt; a row is an array.
    .safeIntegers(false)
    .raw(true);
  const upsertRow = (input: ClaimInput, now: number, leaseToken: string): ClaimedRow | undefined =>
    upsert.get(input.scope, input.key, input.fingerprint, leaseToken, now + input.leaseMs, now, now + input.retentionMs);
  const attempt = database.transaction((input: ClaimInput, now: number, leaseToken: string): ClaimResult => {
    const won = upsertRow(input, now, leaseToken);
    if (won) return acquired(input, now, leaseToken, won);
    const row = sql.get(input.scope, input.key);
    if (!row) throw new Error('retrysafe: the claim conflicted with a record that is gone');
    if (ownedBy(row, input.fingerprint, leaseToken)) return ownClaim(input, leaseToken, row);
    return { acquired: false, record: toRecord(row) };
  });
  return (input, now, leaseToken) => {
    const standing = sql.get(input.scope, input.key);
    if (standing && stands(standing, input.fingerprint, now)) {
      return ownedBy(standing, input.fingerprint, leaseToken) ? ownClaim(input, leaseToken, standing) : { acquired: false, record: toRecord(standing) };
    }
    const won = upsertRow(input, now, leaseToken);
    return won ? acquired(input, now, leaseToken, won) : attempt.immediate(input, now, leaseToken);
  };
}

/** The claim the upsert won, returning `won`. */
function acquired(input: ClaimInput, now: number, leaseToken: string, won: ClaimedRow): ClaimResult {
  // Only a lease takeover keeps the original created_at, which precedes the expired lease and so now;
  // or keeps a recovery point, which a holder may hand back with a zero lease in the same millisecond.
  const [createdAt, recoveryPoint] = won;
  const takeover = createdAt !== now || recoveryPoint !== null;
  return { acquired: true, claim: claimOf(input, leaseToken, now + input.leaseMs, takeover, recoveryPoint) };
}

/** The owner's own claim again (its lease token, `row` being its in-progress record): it holds the lease, unchanged. */
function ownClaim(input: ClaimInput, leaseToken: string, row: RecordRow): ClaimResult {
  return { acquired: true, claim: claimOf(input, leaseToken, row.leaseExpiresAt, false, row.recoveryPoint) };
}

/** The negation of the upsert's WHERE: a record no claim at `now` may take over. */
function stands(row: RecordRow, fingerprint: string, now: number): boolean {
  return row.expiresAt > now && !(row.state === 'in_progress' && row.leaseExpiresAt <= now && row.fingerprint === fingerprint);
}

/** Whether `row` is the in-progress record of the claim presenting `leaseToken`: its owner claiming again. */
function ownedBy(row: RecordRow, fingerprint: string, leaseToken: string): boolean {
  return row.state === 'in_progress' && row.leaseToken === leaseToken && row.fingerprint === fingerprint;
}
