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
 * Every branch is a row of the claim decision table of docs/semantics.md (C4 is tried before C3). A key
 * with no record is inserted (C1); a record whose retention is over is replaced (C2, any fingerprint, no
 * recovery point); an in-progress record whose lease is over under the same fingerprint is taken over
 * (C4, `created_at` and the recovery point kept); otherwise the standing record is returned unchanged
 * (C5 to C7), except to its owner: a claim presenting the standing in-progress record's lease token (and
 * fingerprint) again wins with the lease unchanged (C3). C2 and C4 are two statements, one per row, each
 * guarded by its row's condition, so the claim reports `takeover` from the branch it ran, as Redis does,
 * and a takeover in the same millisecond as a zero-lease hand-back is still reported as one.
 *
 * Every won claim carries a fencing token, the record's `fence` (schema step 3): C1, C2 and C4 set it to
 * the table's counter (`<table>_fence`) plus one in the same statement that claims, and the step's
 * triggers move the counter up to it; C3 reads the standing one back.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { claimOf } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { quoteIdentifier } from './open.js';
import { toRecord, type RecordRow, type Statements } from './statements.js';

/**
 * What the claim's read found when no record stands in the way: no record (C1), a record whose retention is
 * over (C2), or an in-progress record whose lease is over under the same fingerprint (C4).
 */
export type ClaimFound = 'absent' | 'expired' | 'lease-over';

/** What the claim's read found: the answer when a record stands in the way; otherwise which row it may take. */
type ClaimRead = { readonly answer: ClaimResult } | { readonly answer: undefined; readonly found: ClaimFound };

/** The reads that found nothing standing, one object each, so a read allocates only an answer. */
const FOUND: Readonly<Record<ClaimFound, ClaimRead>> = Object.freeze({
  absent: Object.freeze({ answer: undefined, found: 'absent' }),
  expired: Object.freeze({ answer: undefined, found: 'expired' }),
  'lease-over': Object.freeze({ answer: undefined, found: 'lease-over' }),
});

/**
 * The claim's steps, each at `now` (ms) under `leaseToken`. Each throws the driver's error (e.g.
 * `SQLITE_BUSY`).
 */
export interface SqliteClaim {
  /** Reads the record, outside any transaction; answers when a record stands in the way. */
  read(input: ClaimInput, now: number, leaseToken: string): ClaimRead;
  /** Writes the claim on its own (autocommit), after a `read` that did not answer; `found` is what it found. */
  write(input: ClaimInput, now: number, leaseToken: string, found: ClaimFound): ClaimResult;
  /**
   * The whole claim inside a write transaction the caller holds. `found`: what an earlier read found, if
   * one was made; `'absent'` tries the insert before the read (a new key then costs one statement).
   */
  locked(input: ClaimInput, now: number, leaseToken: string, found: ClaimFound | undefined): ClaimResult;
}

/**
 * Prepares the claim against `table` (already validated and migrated); `sql.replay` reads a completed
 * record from its replay text, `sql.get` any record.
 */
export function prepareClaim(database: Database, table: string, sql: Pick<Statements, 'get' | 'replay'>): SqliteClaim {
  const t = quoteIdentifier(table);
  // Hot path: docs/hot-path.md#sqlite-statements
  // The next fencing token: one more than the last one handed out (schema step 3).
  const nextFence = `(SELECT last + 1 FROM ${quoteIdentifier(`${table}_fence`)})`;
  // Parameters by position, cheaper to bind than by name: scope, key, fingerprint, token, lease expiry,
  // now, retention end. Returns the new record's fencing token; no row when the key has a record.
  const insert = database
    .prepare<[string, string, string, string, number, number, number], bigint>(
      `INSERT INTO ${t} (scope, idempotency_key, fingerprint, state, lease_token, lease_expires_at, created_at, expires_at, fence)
        VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?, ${nextFence})
        ON CONFLICT (scope, idempotency_key) DO NOTHING
        RETURNING fence`,
    )
    .pluck(true)
    .safeIntegers(true);
  // C2. Parameters: fingerprint, token, lease expiry, now, retention end, scope, key, now. Returns the new
  // fencing token; no row when the record changed since it was read.
  const replace = database
    .prepare<[string, string, number, number, number, string, string, number], bigint>(
      `UPDATE ${t} SET fingerprint = ?, state = 'in_progress', lease_token = ?, lease_expires_at = ?, recovery_point = NULL,
          response_status = NULL, response_headers = NULL, response_body = NULL, replay = NULL, created_at = ?, completed_at = NULL,
          expires_at = ?, fence = ${nextFence}
        WHERE scope = ? AND idempotency_key = ? AND expires_at <= ?
        RETURNING fence`,
    )
    .pluck(true)
    .safeIntegers(true);
  // C4. Parameters: token, lease expiry, retention end, scope, key, now, fingerprint, now. Returns the
  // recovery point the previous holder reached (NULL when none) and the new fencing token; no row when the
  // record changed since it was read.
  const takeOver = database
    .prepare<[string, number, number, string, string, number, string, number], [string | null, bigint]>(
      `UPDATE ${t} SET lease_token = ?, lease_expires_at = ?, expires_at = ?, fence = ${nextFence}
        WHERE scope = ? AND idempotency_key = ? AND state = 'in_progress' AND lease_expires_at <= ? AND fingerprint = ?
          AND expires_at > ?
        RETURNING recovery_point, fence`,
    )
    .raw(true)
    .safeIntegers(true);
  // C3. Parameters: scope, key, token. The fencing token the owner's record holds (NULL for a record
  // claimed before schema step 3); no row when the record is no longer the owner's.
  const standingFence = database
    .prepare<[string, string, string], bigint | null>(`SELECT fence FROM ${t} WHERE scope = ? AND idempotency_key = ? AND lease_token = ?`)
    .pluck(true)
    .safeIntegers(true);
  const inserted = (input: ClaimInput, now: number, leaseToken: string): ClaimResult | undefined => {
    const fence = insert.get(input.scope, input.key, input.fingerprint, leaseToken, now + input.leaseMs, now, now + input.retentionMs);
    return fence === undefined ? undefined : created(input, now, leaseToken, fence);
  };
  // The write of C2 or C4, guarded by its row's condition; `undefined` when the record no longer meets it.
  const take = (input: ClaimInput, now: number, leaseToken: string, found: 'expired' | 'lease-over'): ClaimResult | undefined => {
    const leaseExpiresAt = now + input.leaseMs;
    if (found === 'expired') {
      const fence = replace.get(input.fingerprint, leaseToken, leaseExpiresAt, now, now + input.retentionMs, input.scope, input.key, now);
      return fence === undefined ? undefined : created(input, now, leaseToken, fence);
    }
    const row = takeOver.get(leaseToken, leaseExpiresAt, now + input.retentionMs, input.scope, input.key, now, input.fingerprint, now);
    return row === undefined ? undefined : { acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, true, row[0], String(row[1])) };
  };
  // The answer to a claim that `row`, standing, refuses (C5 to C7), unless the claim is its owner's (C3).
  const answer = (input: ClaimInput, leaseToken: string, row: RecordRow): ClaimResult =>
    ownedBy(row, input.fingerprint, leaseToken)
      ? ownClaim(input, leaseToken, row, standingFence.get(input.scope, input.key, leaseToken))
      : { acquired: false, record: toRecord(row) };
  // Hot path: docs/hot-path.md#sqlite-replay-read
  // What stands at (scope, key): a completed record is read from its replay text (two values); only a
  // record without one (in progress, or completed before schema step 4) is read whole.
  const read = (input: ClaimInput, now: number, leaseToken: string): ClaimRead => {
    const replayed = sql.replay(input.scope, input.key);
    if (replayed === undefined) return FOUND.absent;
    // A completed record stands until its retention is over (C2); it is no one's own claim (C3).
    if (replayed !== null) return replayed.expiresAt <= now ? FOUND.expired : { answer: { acquired: false, record: replayed } };
    const row = sql.get(input.scope, input.key);
    if (row === undefined) return FOUND.absent;
    const open = openTo(row, input.fingerprint, now);
    return open === undefined ? { answer: answer(input, leaseToken, row) } : FOUND[open];
  };
  const locked = (input: ClaimInput, now: number, leaseToken: string, found: ClaimFound | undefined): ClaimResult => {
    // C1, when a read made ahead found the key absent.
    const first = found === 'absent' ? inserted(input, now, leaseToken) : undefined;
    if (first !== undefined) return first;
    const standing = read(input, now, leaseToken);
    // C3, or C5 to C7.
    if (standing.answer !== undefined) return standing.answer;
    if (standing.found === 'absent') {
      // C1.
      const won = inserted(input, now, leaseToken);
      if (won !== undefined) return won;
      throw new Error('retrysafe: the claim found no record and could not insert one');
    }
    const won = take(input, now, leaseToken, standing.found);
    if (!won) throw new Error('retrysafe: the claim could not take over a record it read as expired');
    return won;
  };
  const retry = database.transaction(locked);
  return {
    read,
    write: (input, now, leaseToken, found) => {
      const won = found === 'absent' ? inserted(input, now, leaseToken) : take(input, now, leaseToken, found);
      // Another process wrote the record after the read: decide again under the write lock.
      return won ?? retry.immediate(input, now, leaseToken, undefined);
    },
    locked,
  };
}

/** The claim that inserted a new record (C1) or replaced an expired one (C2): created now, no recovery point, the new fencing token. */
function created(input: ClaimInput, now: number, leaseToken: string, fence: bigint): ClaimResult {
  return { acquired: true, claim: claimOf(input, leaseToken, now + input.leaseMs, false, null, String(fence)) };
}

/**
 * The owner's own claim again (C3: its lease token, `row` being its in-progress record): it holds the lease
 * and its fencing token (`fence`, as the record holds it), unchanged.
 */
function ownClaim(input: ClaimInput, leaseToken: string, row: RecordRow, fence: bigint | null | undefined): ClaimResult {
  return { acquired: true, claim: claimOf(input, leaseToken, row.leaseExpiresAt, false, row.recoveryPoint, fence === undefined || fence === null ? null : String(fence)) };
}

/** Which row a claim at `now` may take `row` by: C2 (retention over), C4 (lease over, same fingerprint), or none (it stands). */
function openTo(row: RecordRow, fingerprint: string, now: number): 'expired' | 'lease-over' | undefined {
  if (row.expiresAt <= now) return 'expired';
  return row.state === 'in_progress' && row.leaseExpiresAt <= now && row.fingerprint === fingerprint ? 'lease-over' : undefined;
}

/** Whether `row` is the in-progress record of the claim presenting `leaseToken`: its owner claiming again. */
function ownedBy(row: RecordRow, fingerprint: string, leaseToken: string): boolean {
  return row.state === 'in_progress' && row.leaseToken === leaseToken && row.fingerprint === fingerprint;
}
