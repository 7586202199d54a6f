/**
 * The SQLite claim: decided by SQL under the file's write lock, so processes sharing the file get exactly
 * one winner. It comes in three steps, which the store runs as its connection allows:
 *
 * - `read`: a plain read, outside any transaction. A record that stands in the way (a replay, a live lease,
 *   another fingerprint, or the owner's own claim again) is answered from it: a read needs no write lock.
 * - `write`: when the read found none standing, the claim writes on its own, in autocommit mode: SQLite takes
 *   the write lock when the statement starts (waiting for it up to `busy_timeout`, as `BEGIN IMMEDIATE`
 *   would) and commits when it ends, so the statement is atomic. A key the read found absent is inserted
 *   (`INSERT … ON CONFLICT DO NOTHING`, nothing returned: the new record is known); a record the read found
 *   expired is taken over by the upsert. Only when that does not win (another process wrote the record
 *   after the read) does the claim run again, `locked`, under `BEGIN IMMEDIATE`.
 * - `locked`: the whole claim inside a write transaction the caller holds (a group commit, a transactional
 *   claim, or the retry above): the read and the write see one state, so the read decides.
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

/** What the claim's read found: the answer when a record stands in the way; otherwise whether the key had no record at all. */
type ClaimRead = { readonly answer: ClaimResult } | { readonly answer: undefined; readonly absent: boolean };

/**
 * The claim's steps, each at `now` (ms) under `leaseToken`. Each throws the driver's error (e.g.
 * `SQLITE_BUSY`).
 */
export interface SqliteClaim {
  /** Reads the record, outside any transaction; answers when a record stands in the way. */
  read(input: ClaimInput, now: number, leaseToken: string): ClaimRead;
  /** Writes the claim on its own (autocommit), after a `read` that did not answer; `absent` is what it found. */
  write(input: ClaimInput, now: number, leaseToken: string, absent: boolean): ClaimResult;
  /**
   * The whole claim inside a write transaction the caller holds. `absent`: an earlier read found no record,
   * so the insert is tried before the read (a new key then costs one statement).
   */
  locked(input: ClaimInput, now: number, leaseToken: string, absent: boolean): ClaimResult;
}

/** What the upsert returns when the caller won: its created_at and recovery point, in raw mode. */
type ClaimedRow = readonly [createdAt: number, recoveryPoint: string | null];

/** Prepares the claim against `table` (already validated and migrated); `sql.get` reads a record. */
export function prepareClaim(database: Database, table: string, sql: Pick<Statements, 'get'>): SqliteClaim {
  const t = quoteIdentifier(table);
  // Hot path: docs/hot-path.md#sqlite-statements
  // Parameters by position (scope, key, fingerprint, token, lease expiry, now, retention end), cheaper to
  // bind than by name.
  const insert = database.prepare<[string, string, string, string, number, number, number]>(
    `INSERT INTO ${t} (scope, idempotency_key, fingerprint, state, lease_token, lease_expires_at, created_at, expires_at)
      VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?)
      ON CONFLICT (scope, idempotency_key) DO NOTHING`,
  );
  // In the update, excluded.created_at is now.
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
  const inserted = (input: ClaimInput, now: number, leaseToken: string): boolean =>
    insert.run(input.scope, input.key, input.fingerprint, leaseToken, now + input.leaseMs, now, now + input.retentionMs).changes === 1;
  const upsertRow = (input: ClaimInput, now: number, leaseToken: string): ClaimedRow | undefined =>
    upsert.get(input.scope, input.key, input.fingerprint, leaseToken, now + input.leaseMs, now, now + input.retentionMs);
  const locked = (input: ClaimInput, now: number, leaseToken: string, absent: boolean): ClaimResult => {
    if (absent && inserted(input, now, leaseToken)) return created(input, now, leaseToken);
    const row = sql.get(input.scope, input.key);
    if (row === undefined) {
      if (inserted(input, now, leaseToken)) return created(input, now, leaseToken);
      throw new Error('retrysafe: the claim found no record and could not insert one');
    }
    if (stands(row, input.fingerprint, now)) return answer(input, leaseToken, row);
    const won = upsertRow(input, now, leaseToken);
    if (!won) throw new Error('retrysafe: the claim could not take over a record it read as expired');
    return acquired(input, now, leaseToken, won);
  };
  const retry = database.transaction(locked);
  return {
    read: (input, now, leaseToken) => {
      const row = sql.get(input.scope, input.key);
      if (row === undefined) return { answer: undefined, absent: true };
      return stands(row, input.fingerprint, now) ? { answer: answer(input, leaseToken, row) } : { answer: undefined, absent: false };
    },
    write: (input, now, leaseToken, absent) => {
      if (absent) {
        if (inserted(input, now, leaseToken)) return created(input, now, leaseToken);
      } else {
        const won = upsertRow(input, now, leaseToken);
        if (won) return acquired(input, now, leaseToken, won);
      }
      return retry.immediate(input, now, leaseToken, false);
    },
    locked,
  };
}

/** The answer to a claim that `row`, standing, refuses, unless the claim is its owner's. */
function answer(input: ClaimInput, leaseToken: string, row: RecordRow): ClaimResult {
  return ownedBy(row, input.fingerprint, leaseToken) ? ownClaim(input, leaseToken, row) : { acquired: false, record: toRecord(row) };
}

/** The claim that inserted a new record: created now, no recovery point. */
function created(input: ClaimInput, now: number, leaseToken: string): ClaimResult {
  return { acquired: true, claim: claimOf(input, leaseToken, now + input.leaseMs, false, null) };
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
