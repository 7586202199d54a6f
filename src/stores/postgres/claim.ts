/**
 * The PostgreSQL claim: one call of the schema's `claim()` function, one statement and one round trip,
 * always on its own (never inside a business transaction), so it commits at once and a concurrent
 * duplicate sees the in-progress record without waiting on a row lock.
 *
 * `claim()` (migration 0004 defines it as it stands; docs/schema.sql shows the whole schema) inserts the
 * record, or takes it over when its retention expired (any fingerprint, the recovery point cleared) or its
 * lease expired (same fingerprint, still in progress, the recovery point kept), or else returns the
 * standing record unchanged — a replay reads and locks nothing. It returns exactly one row: `acquired`,
 * `takeover`, then the record's columns.
 *
 * @module
 */
import { claimOf, type Claim } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { encodeToken, decodeToken } from './codec.js';
import { RECORD_COLUMNS, toRecord, type RecordRow } from './rows.js';
import { nowOf, run, statement, type Queryable, type Statement } from './statement.js';

/** The row `claim()` returns: the outcome flags, then the record (`RECORD_COLUMNS`). */
interface ClaimRow extends RecordRow {
  readonly acquired: boolean;
  readonly takeover: boolean;
}

/**
 * The claim statement for the schema `s` (an already quoted identifier). `$1` scope, `$2` key, `$3`
 * fingerprint (encoded), `$4` new lease token (encoded), `$5` now (ms, or `null` for the server's clock),
 * `$6` lease (ms), `$7` retention (ms).
 */
export function claimStatement(s: string, prepared: boolean): Statement {
  return statement(`SELECT acquired, takeover, ${RECORD_COLUMNS} FROM ${s}.claim($1, $2, $3, $4, ${nowOf('$5')}, $6, $7)`, prepared);
}

/** Claims `input` on `db` under `leaseToken`, at `now` (ms), or at the server's `clock_timestamp()` when `now` is `null`. */
export async function claimOn(db: Queryable, sql: Statement, input: ClaimInput, now: number | null, leaseToken: string): Promise<ClaimResult> {
  const result = await run<ClaimRow>(db, sql, [
    input.scope,
    input.key,
    encodeToken(input.fingerprint),
    encodeToken(leaseToken),
    now,
    input.leaseMs,
    input.retentionMs,
  ]);
  const row = result.rows[0];
  if (row === undefined) throw new Error('retrysafe: the claim() function returned no row');
  return row.acquired
    ? { acquired: true, claim: toClaim(input.scope, input.key, row) }
    : { acquired: false, record: toRecord(input.scope, input.key, row) };
}

/** The winner's claim; a takeover carries the recovery point the previous holder reached. */
function toClaim(scope: string, key: string, row: ClaimRow): Claim {
  return claimOf({ scope, key, fingerprint: decodeToken(row.fingerprint) }, decodeToken(row.leaseToken), Number(row.leaseExpiresAt), row.takeover, row.recoveryPoint);
}
