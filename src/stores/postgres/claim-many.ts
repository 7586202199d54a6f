/**
 * The PostgreSQL claim of a whole batch: ONE statement over arrays. `unnest` turns the batch's columns
 * (scope, key, fingerprint, owner token, lease, retention) into rows, and the schema's `claim()` function
 * (the same one a single claim falls back to; see `claim.ts`) decides each row by the claim decision table
 * of docs/semantics.md (C1 to C7), in input order. Committed on its own, like a single claim, so a
 * concurrent duplicate sees every in-progress record at once.
 *
 * @module
 */
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { toClaim, type ClaimRow } from './claim.js';
import { encodeToken } from './codec.js';
import { RECORD_COLUMNS, toRecord } from './rows.js';
import { nowOf, run, statement, type Queryable, type Statement } from './statement.js';

/** A row of the batch claim: the input's position, then `claim()`'s row (the outcome flags, the record, its fencing token). */
interface ClaimManyRow extends ClaimRow {
  readonly ord: string;
}

/**
 * The batch claim for the schema `s` (an already quoted identifier), with the parameters `$1` scopes,
 * `$2` keys, `$3` fingerprints (encoded), `$4` owner tokens (encoded), `$5` leases (ms), `$6` retentions
 * (ms), each an array with one element per input, and `$7` now (ms, or `null` for the server's clock).
 */
export function claimManyStatement(s: string, prepared: boolean): Statement {
  return statement(
    `SELECT i.ord, c.acquired, c.takeover, ${RECORD_COLUMNS}, c.fence::text AS "fencingToken"
    FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[], $6::bigint[])
      WITH ORDINALITY AS i(p_scope, p_key, p_fingerprint, p_token, p_lease, p_retention, ord),
    LATERAL ${s}.claim(i.p_scope, i.p_key, i.p_fingerprint, i.p_token, ${nowOf('$7')}, i.p_lease, i.p_retention) AS c
    ORDER BY i.ord`,
    prepared,
  );
}

/** Claims every input on `db` in one statement, under the owner tokens `tokens` (one per input), at `now` (ms) or the server's clock (`null`). */
export async function claimManyOn(db: Queryable, sql: Statement, inputs: readonly ClaimInput[], now: number | null, tokens: readonly string[]): Promise<ClaimResult[]> {
  const values = [
    inputs.map((input) => input.scope),
    inputs.map((input) => input.key),
    inputs.map((input) => encodeToken(input.fingerprint)),
    tokens.map(encodeToken),
    inputs.map((input) => input.leaseMs),
    inputs.map((input) => input.retentionMs),
    now,
  ];
  const rows = (await run<ClaimManyRow>(db, sql, values)).rows;
  if (rows.length !== inputs.length) throw new Error(`retrysafe: the batch claim returned ${rows.length} rows for ${inputs.length} inputs`);
  return rows.map((row, at): ClaimResult => {
    const input = inputs[at] as ClaimInput;
    return row.acquired ? { acquired: true, claim: toClaim(input.scope, input.key, row) } : { acquired: false, record: toRecord(input.scope, input.key, row) };
  });
}
