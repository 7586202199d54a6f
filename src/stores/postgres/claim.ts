// Hot path: docs/hot-path.md#postgresql-claim-columns
/**
 * The PostgreSQL claim, always on its own (never inside a business transaction), so it commits at once
 * and a concurrent duplicate sees the in-progress record without waiting on a row lock.
 *
 * It is one plain SQL statement in the common cases, one round trip: it reads the record by its primary
 * key and, when there is none, inserts it (`INSERT … ON CONFLICT DO NOTHING`). A new key is won there; a
 * record that stands in the way (a replay, a live lease, another fingerprint) is returned as read, so a
 * replay reads and locks nothing and runs no PL/pgSQL. The statement decides "stands" by the server's
 * clock, as the negation of every case in which `claim()` would not simply return the record: a retention
 * that ended, a lease that ended under the same fingerprint, the owner's own claim again.
 *
 * Those cases, and a race (another transaction inserted the key after the statement's snapshot), go to the
 * schema's `claim()` function in a second round trip. `claim()` (migration 0013 defines it as it stands;
 * docs/schema.sql shows the whole schema) inserts the record, or takes it over when its retention expired
 * (any fingerprint, the recovery point cleared) or its lease expired (same fingerprint, still in progress,
 * the recovery point kept), answers the owner's own claim with its lease unchanged, or else returns the
 * standing record unchanged, retrying its steps when a concurrent change slips between them. It returns
 * exactly one row: `acquired`, `takeover`, the record's columns, then its `fence`.
 *
 * Every won claim carries the record's `fence` as its fencing token: the column's default (a number from
 * the schema's sequence `records_fence_seq`) for a new record, a fresh number from the sequence for a
 * takeover, the standing one for the owner's claim again (migration 0013).
 *
 * Both decide by the claim decision table of docs/semantics.md. The read-or-insert statement answers C1
 * (it inserted) and C5 to C7 (`stands`); `claim()`'s branches, in the order migration 0013 writes them
 * (a released migration's SQL never changes, so the rows are cited here): the `INSERT … DO NOTHING` that
 * found its row is C1; `r.expires_at <= p_now` is C2; the owner's token and fingerprint is C3 (tried
 * before C4); the lease over under the same fingerprint is C4, `takeover` true from that branch; the
 * final `ELSE` is C5 to C7.
 *
 * The read-or-insert statement returns two columns, not one per field: the decision and the record's
 * small fields as one JSON array, and the body. node-postgres's cost per result grows with its columns (it
 * parses a description of each column and sets up a type parser and a property for it, again for every
 * result). A replay cost the server process about 10 % more instructions with twelve columns (one per
 * field) than with five, and about 6 % more with five than with two
 * (`bench/cpu-instructions.mjs . pg-replay 3000 16`).
 *
 * @module
 */
import { claimOf, type Claim, type IdempotencyRecord } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { decodeHexToken, decodeToken, encodeToken } from './codec.js';
import { RECORD_COLUMNS, recordOf, toRecord, type RecordRow } from './rows.js';
import { nowOf, run, statement, type Queryable, type Statement } from './statement.js';

/** The row `claim()` returns: the outcome flags, the record (`RECORD_COLUMNS`), its fencing token (decimal text; null on a record claimed before migration 0013). */
export interface ClaimRow extends RecordRow {
  readonly acquired: boolean;
  readonly takeover: boolean;
  readonly fencingToken: string | null;
}

/**
 * The row of the read-or-insert statement: its decision and the record's small fields in one JSON array
 * (`head`), and the saved body. `head` is `[true, leaseExpiresAt, fencingToken]` when it inserted (the new
 * lease's end, the new record's fence as decimal text);
 * otherwise the record as read, `[false, stands, …]` ({@link StandingHead}), `stands` telling whether
 * `claim()` would return it unchanged.
 */
interface ReadOrInsertRow {
  readonly head: readonly [acquired: true, leaseExpiresAt: number, fencingToken: string] | StandingHead;
  readonly body: Buffer | null;
}

/**
 * A standing record's head as the read-or-insert statement's `json_build_array` lists it: the encoded
 * tokens in hex, the times in milliseconds since the epoch (JSON numbers), the headers as a JSON object.
 */
type StandingHead = readonly [
  acquired: false,
  stands: boolean,
  leaseExpiresAt: number,
  fingerprint: string,
  leaseToken: string,
  createdAt: number,
  expiresAt: number,
  completedAt: number | null,
  status: number | null,
  headers: Record<string, string> | null,
  recoveryPoint: string | null,
];

/** The two statements of a claim. */
interface ClaimStatements {
  /** The read-or-insert statement, one round trip for a new key and for a record that stands. */
  readonly claim: Statement;
  /** `claim()`, for takeovers, the owner's claim again and races. */
  readonly claimFunction: Statement;
}

/**
 * The claim statements for the schema `s` (an already quoted identifier), both with the parameters `$1`
 * scope, `$2` key, `$3` fingerprint (encoded), `$4` new lease token (encoded), `$5` now (ms, or `null` for
 * the server's clock), `$6` lease (ms), `$7` retention (ms). The clock is read once per statement (a CTE
 * with a volatile function is evaluated once).
 */
export function claimStatements(s: string, prepared: boolean): ClaimStatements {
  return Object.freeze({
    claim: statement(
      `WITH clock AS (SELECT ${nowOf('$5')} AS ms),
      standing AS (SELECT ${RECORD_COLUMNS} FROM ${s}.records WHERE scope = $1::text AND key = $2::text),
      inserted AS (
        INSERT INTO ${s}.records (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at)
        SELECT $1::text, $2::text, $3::bytea, $4::bytea, clock.ms + $6::bigint, clock.ms, clock.ms + $7::bigint FROM clock
        WHERE NOT EXISTS (SELECT FROM standing)
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING lease_expires_at, fence)
      SELECT json_build_array(true, lease_expires_at, fence::text) AS head, NULL::bytea AS body
      FROM inserted
      UNION ALL
      SELECT json_build_array(false,
          standing."expiresAt" > clock.ms
            AND NOT (standing."completedAt" IS NULL AND standing.fingerprint = $3::bytea
                     AND (standing."leaseExpiresAt" <= clock.ms OR standing."leaseToken" = $4::bytea)),
          standing."leaseExpiresAt", encode(standing.fingerprint, 'hex'), encode(standing."leaseToken", 'hex'),
          standing."createdAt", standing."expiresAt", standing."completedAt", standing.status, standing.headers,
          standing."recoveryPoint"),
        standing.body
      FROM standing, clock`,
      prepared,
    ),
    claimFunction: statement(
      `SELECT acquired, takeover, ${RECORD_COLUMNS}, fence::text AS "fencingToken" FROM ${s}.claim($1, $2, $3, $4, ${nowOf('$5')}, $6, $7)`,
      prepared,
    ),
  });
}

/** Claims `input` on `db` under `leaseToken`, at `now` (ms), or at the server's `clock_timestamp()` when `now` is `null`. */
export async function claimOn(db: Queryable, sql: ClaimStatements, input: ClaimInput, now: number | null, leaseToken: string): Promise<ClaimResult> {
  const values = [input.scope, input.key, encodeToken(input.fingerprint), encodeToken(leaseToken), now, input.leaseMs, input.retentionMs];
  const read = (await run<ReadOrInsertRow>(db, sql.claim, values)).rows[0];
  // No row (another transaction inserted the key after the statement's snapshot), or a record that does
  // not simply stand: `claim()` decides.
  if (read !== undefined) {
    const { head, body } = read;
    // C1: the key had no record; the statement inserted it.
    if (head[0]) {
      return {
        acquired: true,
        claim: {
          scope: input.scope,
          key: input.key,
          fingerprint: input.fingerprint,
          leaseToken,
          leaseExpiresAt: head[1],
          takeover: false,
          fencingToken: head[2],
        },
      };
    }
    // C5 to C7: the record stands (`stands` is the negation of C2, C3 and C4).
    if (head[1]) return { acquired: false, record: standingRecord(input.scope, input.key, head, body) };
  }
  // C2, C3, C4, or a race: `claim()` decides (its branches are listed above).
  const row = (await run<ClaimRow>(db, sql.claimFunction, values)).rows[0];
  if (row === undefined) throw new Error('retrysafe: the claim() function returned no row');
  return row.acquired
    ? { acquired: true, claim: toClaim(input.scope, input.key, row) }
    : { acquired: false, record: toRecord(input.scope, input.key, row) };
}

/** The record of (scope, key) from a standing record's head and body as the read-or-insert statement returns them. */
function standingRecord(scope: string, key: string, head: StandingHead, body: Buffer | null): IdempotencyRecord {
  const [, , leaseExpiresAt, fingerprint, leaseToken, createdAt, expiresAt, completedAt, status, headers, recoveryPoint] = head;
  return recordOf(scope, key, decodeHexToken(fingerprint), decodeHexToken(leaseToken), {
    leaseExpiresAt,
    createdAt,
    expiresAt,
    completedAt,
    status,
    headers,
    body,
    recoveryPoint,
  });
}

/** The winner's claim, with its fencing token; a takeover carries the recovery point the previous holder reached. */
export function toClaim(scope: string, key: string, row: ClaimRow): Claim {
  const input = { scope, key, fingerprint: decodeToken(row.fingerprint) };
  return claimOf(input, decodeToken(row.leaseToken), Number(row.leaseExpiresAt), row.takeover, row.recoveryPoint, row.fencingToken);
}
