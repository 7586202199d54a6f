// Hot path: docs/hot-path.md#postgresql-locked-claims
/**
 * The locked claim of transactional mode (`transactionalClaim: 'locked'`): the claim is taken inside the
 * business transaction, as a transaction-scoped advisory lock on the key, and the record is written only
 * once, completed, in the same transaction as the business rows, so a new key costs one durable commit.
 *
 * The statements, in order, on the transaction's connection:
 * 1. `BEGIN`, the server-side bounds and `pg_try_advisory_xact_lock(k)` in one simple-protocol round trip,
 *    `k` the key's 64-bit lock number ({@link lockNumberOf}). Nothing waits on the lock.
 * 2. The record read ({@link LockedClaimStatements.read}), a statement of its own: under READ COMMITTED
 *    its snapshot is taken after the lock was granted, and a holder's COMMIT is visible before its locks
 *    are released, so the read sees the record of every holder that ended before it. A record that
 *    stands answers (a replay, 409, 422), with the lock or without it (a replay holds the lock for a
 *    moment, and a concurrent replay must not read that as a request in flight); with no record and the
 *    lock held, the request is in flight: 409 at once.
 * 3. The handler's statements, then the record inserted completed ({@link LockedClaimStatements.insertCompleted}),
 *    or in progress with its recovery point for an atomic phase ({@link LockedClaimStatements.insertCheckpoint}).
 * 4. `COMMIT`, which releases the lock. A crash or a rollback takes the record and the business rows back
 *    together and releases the lock; the primary key stays the last guard (a record inserted apart from
 *    the lock makes the insert a no-op, and the completion is refused).
 *
 * A record that does not simply stand (an expired retention, an expired lease of the same fingerprint)
 * is left to the committed claim (`claim.ts`): the transaction rolls back and the store claims apart.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { IdempotencyRecord } from '../../core/record.js';
import type { ClaimInput } from '../../core/store.js';
import { RECORD_COLUMNS, toRecord, type RecordRow } from './rows.js';
import { nowOf, statement, type Statement } from './statement.js';

/** The statements of the locked claim for one schema. */
export interface LockedClaimStatements {
  /**
   * `$1` scope, `$2` key, `$3` now (ms, or `null` for the server's clock). Exactly one row: `now` (ms, as
   * decimal text), `fence` (a fresh number from `records_fence_seq`, decimal text, only when there is no
   * record; else null), then the record's `RECORD_COLUMNS`, all null when there is none.
   */
  readonly read: Statement;
  /**
   * `$1` scope, `$2` key, `$3` fingerprint (encoded), `$4` lease token (encoded), `$5` lease end (ms),
   * `$6` created at (ms), `$7` now (ms, or `null` for the server's clock), `$8` retention (ms), `$9`
   * status, `$10` headers (JSON text), `$11` body. Inserts the completed record (no fence, as `complete`
   * leaves it); no row when one already exists (`ON CONFLICT DO NOTHING`).
   */
  readonly insertCompleted: Statement;
  /**
   * `$1` scope, `$2` key, `$3` fingerprint (encoded), `$4` lease token (encoded), `$5` recovery point,
   * `$6` now (ms, or `null` for the server's clock), `$7` the lease (ms), `$8` created at (ms), `$9`
   * retention (ms), `$10` fence. Inserts the in-progress record of an atomic phase: the lease ends `$7`
   * after now, the retention `$9` after `$8`, stretched to cover the lease. One row (`leaseExpiresAt`), or
   * none when a record already exists.
   */
  readonly insertCheckpoint: Statement;
  /**
   * `$1` lock number, `$2` timeout (ms, text). Waits, at most `$2` milliseconds (`lock_timeout`, set for
   * this one statement), until no transaction holds the key's lock, and returns at once when none does.
   */
  readonly waitForLock: Statement;
}

/** The locked claim's statements for the schema `s` (an already quoted identifier). */
export function lockedClaimStatements(s: string, prepared: boolean): LockedClaimStatements {
  return Object.freeze({
    read: statement(
      `SELECT clock.ms::text AS now, CASE WHEN r.fingerprint IS NULL THEN nextval('${s}.records_fence_seq')::text END AS fence, r.*
      FROM (SELECT ${nowOf('$3')} AS ms) AS clock
      LEFT JOIN (SELECT ${RECORD_COLUMNS} FROM ${s}.records WHERE scope = $1::text AND key = $2::text) AS r ON true`,
      prepared,
    ),
    insertCompleted: statement(
      `INSERT INTO ${s}.records (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at, completed_at, status, headers, body, fence)
      SELECT $1::text, $2::text, $3::bytea, $4::bytea, $5::bigint, $6::bigint, clock.ms + $8::bigint, clock.ms, $9::smallint, $10::json, $11::bytea, NULL
      FROM (SELECT ${nowOf('$7')} AS ms) AS clock
      ON CONFLICT (scope, key) DO NOTHING`,
      prepared,
    ),
    insertCheckpoint: statement(
      `INSERT INTO ${s}.records (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at, recovery_point, fence)
      SELECT $1::text, $2::text, $3::bytea, $4::bytea, clock.ms + $7::bigint, $8::bigint, GREATEST($8::bigint + $9::bigint, clock.ms + $7::bigint), $5::text, $10::bigint
      FROM (SELECT ${nowOf('$6')} AS ms) AS clock
      ON CONFLICT (scope, key) DO NOTHING
      RETURNING lease_expires_at AS "leaseExpiresAt"`,
      prepared,
    ),
    waitForLock: statement(`SELECT set_config('lock_timeout', $2::text, true), pg_advisory_xact_lock_shared($1::bigint)`, prepared),
  });
}

/**
 * The key's advisory lock number, as decimal text: the first 8 bytes of the SHA-256 of the schema, scope
 * and key (JSON-encoded, so no two triples share a text), read as a signed 64-bit integer. Two stores on
 * different schemas never share a number by construction; two keys share one with probability 2^-64.
 */
export function lockNumberOf(schema: string, scope: string, key: string): string {
  return createHash('sha256').update(JSON.stringify([schema, scope, key])).digest().readBigInt64BE(0).toString();
}

/**
 * `begin` (with its bounds) followed, in the same round trip, by the attempt at the key's lock; the last
 * result's one row is `{ locked }`.
 */
export function lockingBegin(begin: string, lockNumber: string): string {
  return `${begin}; SELECT pg_try_advisory_xact_lock(${lockNumber}) AS locked`;
}

/** The read's row: the server's now and a fresh fence, then the record's columns (all null when there is none). */
export interface LockedReadRow extends Omit<RecordRow, 'fingerprint'> {
  readonly now: string;
  readonly fence: string | null;
  readonly fingerprint: Buffer | null;
}

/**
 * What the read decides: `new` (no record: the lock wins the key), `stands` (the record answers the
 * request, as the committed claim's C5 to C7), or `apart` (an expired retention or lease, left to the
 * committed claim, whose `claim()` decides it).
 */
type LockedDecision =
  | { readonly kind: 'new'; readonly now: number; readonly fence: string }
  | { readonly kind: 'stands'; readonly record: IdempotencyRecord }
  | { readonly kind: 'apart' };

/** Decides the read's row for `input` (`leaseToken`: this attempt's owner token), by the claim decision table. */
export function decideLocked(input: ClaimInput, leaseToken: string, row: LockedReadRow): LockedDecision {
  const now = Number(row.now);
  if (row.fingerprint === null) return { kind: 'new', now, fence: row.fence as string };
  const record = toRecord(input.scope, input.key, row as RecordRow);
  const takeable = record.expiresAt <= now || (record.state === 'in_progress' && record.fingerprint === input.fingerprint && (record.leaseExpiresAt <= now || record.leaseToken === leaseToken));
  return takeable ? { kind: 'apart' } : { kind: 'stands', record };
}

/**
 * The answer to a duplicate that found the key's lock held and no record standing: a request in flight
 * under this fingerprint (its holder's is not visible before it commits), its lease taken to last
 * `input.leaseMs` from `now` (ms), so a waiting duplicate waits for the lock rather than claiming again at once.
 */
export function heldRecord(input: ClaimInput, now: number): IdempotencyRecord {
  return {
    scope: input.scope,
    key: input.key,
    fingerprint: input.fingerprint,
    state: 'in_progress',
    leaseToken: '',
    leaseExpiresAt: now + input.leaseMs,
    createdAt: now,
    expiresAt: now + input.retentionMs,
  };
}
