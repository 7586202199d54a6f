// Hot path: docs/hot-path.md#postgresql-claim-columns
/**
 * The PostgreSQL claim, always on its own (never inside a business transaction), so it commits at once
 * and a concurrent duplicate sees the in-progress record without waiting on a row lock.
 *
 * Its first step is one statement, one round trip, in the common cases: the schema's `read_or_insert()`
 * (migration 0015) reads the record by its primary key and, only when there is none, inserts it
 * (`INSERT … ON CONFLICT DO NOTHING`). A new key is won there; a record that stands in the way (a replay,
 * a live lease, another fingerprint) is returned as read, so a replay locks nothing and runs no insert.
 * It decides "stands" by the server's clock, as the negation of every case in which `claim()` would not
 * simply return the record: a retention that ended, a lease that ended under the same fingerprint, the
 * owner's own claim again.
 *
 * Those cases, and a race (another transaction inserted the key after the read), go to the
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
 * Both decide by the claim decision table of docs/semantics.md. `read_or_insert()` answers C1
 * (it inserted) and C5 to C7 (`stands`); `claim()`'s branches, in the order migration 0013 writes them
 * (a released migration's SQL never changes, so the rows are cited here): the `INSERT … DO NOTHING` that
 * found its row is C1; `r.expires_at <= p_now` is C2; the owner's token and fingerprint is C3 (tried
 * before C4); the lease over under the same fingerprint is C4, `takeover` true from that branch; the
 * final `ELSE` is C5 to C7.
 *
 * `read_or_insert()` returns one `json` value: the decision, the record's small fields and its body (in
 * base64) in one array, not a column per field, and the calling statement is a plain `SELECT` of it.
 * node-postgres's cost per result grows with its columns (it parses a description of each column and
 * sets up a type parser and a property for it, again for every result); PostgreSQL's grows with the
 * plan's nodes (a function scan sets up a tuple descriptor on every call). A replay cost the server
 * process about 10 % more instructions with twelve columns (one per field) than with five, and about 6 %
 * more with five than with two (`bench/cpu-instructions.mjs . pg-replay 3000 16`); the PostgreSQL backend
 * about 150,000 instructions with the body as a second column of a function scan, 129,000 with one
 * value, 184,000 with the earlier statement whose `INSERT` sat in a CTE
 * (`bench/pg-backend-instructions.mjs . replay`).
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
 * What `read_or_insert()` returns ({@link Head}), or null when the key had no record and the insert met one
 * (another transaction inserted it after the read).
 */
interface ReadOrInsertRow {
  readonly head: Head | null;
}

/**
 * `[true, leaseExpiresAt, fencingToken]` when `read_or_insert()` inserted (the new lease's end, the new
 * record's fence as decimal text); otherwise the record as read, `[false, stands, …]` ({@link StandingHead}),
 * `stands` telling whether `claim()` would return it unchanged.
 */
type Head = readonly [acquired: true, leaseExpiresAt: number, fencingToken: string] | StandingHead;

/**
 * A standing record as `read_or_insert()`'s `json_build_array` lists it: the encoded tokens in hex, the
 * times in milliseconds since the epoch (JSON numbers), the headers as a JSON object, the body in base64.
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
  body: string | null,
];

/** The two statements of a claim. */
interface ClaimStatements {
  /** `read_or_insert()`, one round trip for a new key and for a record that stands. */
  readonly claim: Statement;
  /** `claim()`, for takeovers, the owner's claim again and races. */
  readonly claimFunction: Statement;
}

/**
 * The claim statements for the schema `s` (an already quoted identifier), both with the parameters `$1`
 * scope, `$2` key, `$3` fingerprint (encoded), `$4` new lease token (encoded), `$5` now (ms, or `null` for
 * the server's clock), `$6` lease (ms), `$7` retention (ms). The clock is read once per statement (an
 * argument of the function call).
 */
export function claimStatements(s: string, prepared: boolean): ClaimStatements {
  return Object.freeze({
    claim: statement(`SELECT ${s}.read_or_insert($1, $2, $3, $4, ${nowOf('$5')}, $6, $7) AS head`, prepared),
    claimFunction: statement(
      `SELECT acquired, takeover, ${RECORD_COLUMNS}, fence::text AS "fencingToken" FROM ${s}.claim($1, $2, $3, $4, ${nowOf('$5')}, $6, $7)`,
      prepared,
    ),
  });
}

/** Claims `input` on `db` under `leaseToken`, at `now` (ms), or at the server's `clock_timestamp()` when `now` is `null`. */
export async function claimOn(db: Queryable, sql: ClaimStatements, input: ClaimInput, now: number | null, leaseToken: string): Promise<ClaimResult> {
  const values = [input.scope, input.key, encodeToken(input.fingerprint), encodeToken(leaseToken), now, input.leaseMs, input.retentionMs];
  const head = (await run<ReadOrInsertRow>(db, sql.claim, values)).rows[0]?.head ?? null;
  // A race (another transaction inserted the key after the read), or a record that does not simply
  // stand: `claim()` decides.
  if (head !== null) {
    // C1: the key had no record; the function inserted it.
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
    if (head[1]) return { acquired: false, record: standingRecord(input.scope, input.key, head) };
  }
  // C2, C3, C4, or a race: `claim()` decides (its branches are listed above).
  const row = (await run<ClaimRow>(db, sql.claimFunction, values)).rows[0];
  if (row === undefined) throw new Error('retrysafe: the claim() function returned no row');
  return row.acquired
    ? { acquired: true, claim: toClaim(input.scope, input.key, row) }
    : { acquired: false, record: toRecord(input.scope, input.key, row) };
}

/** The record of (scope, key) from a standing record's head as `read_or_insert()` returns it. */
function standingRecord(scope: string, key: string, head: StandingHead): IdempotencyRecord {
  const [, , leaseExpiresAt, fingerprint, leaseToken, createdAt, expiresAt, completedAt, status, headers, recoveryPoint, body] = head;
  return recordOf(scope, key, decodeHexToken(fingerprint), decodeHexToken(leaseToken), {
    leaseExpiresAt,
    createdAt,
    expiresAt,
    completedAt,
    status,
    headers,
    body: body === null ? null : Buffer.from(body, 'base64'),
    recoveryPoint,
  });
}

/** The winner's claim, with its fencing token; a takeover carries the recovery point the previous holder reached. */
export function toClaim(scope: string, key: string, row: ClaimRow): Claim {
  const input = { scope, key, fingerprint: decodeToken(row.fingerprint) };
  return claimOf(input, decodeToken(row.leaseToken), Number(row.leaseExpiresAt), row.takeover, row.recoveryPoint, row.fencingToken);
}
