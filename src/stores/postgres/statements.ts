/**
 * The runtime SQL of the PostgreSQL store, one statement per operation, built once per schema. Each
 * statement's `$1…$n` are documented where it is defined. Times are milliseconds since the epoch of the
 * database server's clock, read inside each statement (`SERVER_NOW_MS` in `statement.ts`), so every process sharing
 * the store decides leases and retention by one clock, whatever its own clock says. A `now` parameter
 * passed as a number replaces the server's clock (tests on a fake clock); passed as `null` it is ignored.
 *
 * @module
 */
import pg from 'pg';
import { requireDurationMs } from '../../core/validate.js';
import { claimStatements } from './claim.js';
import { RECORD_COLUMNS } from './rows.js';
import type { SchemaNames } from './schema.js';
import { nowOf, statement, type Statement } from './statement.js';

// Through the default export: pg ships named ESM exports only from 8.15, and retrysafe supports 8.11 and later.
const { escapeIdentifier, escapeLiteral } = pg;

/** The statements for one schema. */
export interface Statements {
  /** The claim's first step, `read_or_insert()` (migration 0015); see `claim.ts`. */
  readonly claim: Statement;
  /** The claim's second step, `claim()`, for what the first one leaves to it; see `claim.ts`. */
  readonly claimFunction: Statement;
  /**
   * `$1` scope, `$2` key, `$3` lease token (encoded), `$4` now (ms, or `null` for the server's clock),
   * `$5` retention (ms), `$6` status,
   * `$7` headers (JSON text), `$8` body, `$9` notification topic. One row when completed (fenced: only the
   * current holder of an in-progress record), none otherwise ({@link Statements.completedAgain} then tells
   * a completion run again from one fenced off). Notifies (at COMMIT when in a transaction) only when a
   * waiter has set the record's `waiters` flag (migration 0006), from the `RETURNING` list. Clears the
   * fencing token (`fence`, migration 0013): it serves only the claim in progress, and a NULL costs a
   * completed row no bytes, where a bigint after the body costs it up to 15.
   *
   * A plain `UPDATE`, not a CTE with a second branch for the completion run again: a new key's backend
   * work fell from 514,035 to 464,250 instructions (`bench/pg-backend-instructions.mjs . new`). It
   * is not a HOT update, and cannot be one: it sets `expires_at` (indexed for the reaper) and
   * `completed_at` (in the predicate of `records_abandoned_idx`).
   */
  readonly complete: Statement;
  /**
   * `$1` scope, `$2` key, `$3` lease token (encoded). One row when the record is completed under `$3`:
   * asked only when `complete` changed nothing, it tells a completion run again (its first reply lost;
   * nothing changes) from one whose lease was lost.
   */
  readonly completedAgain: Statement;
  /**
   * `$1` scope, `$2` key, `$3` lease token (encoded), `$4` notification topic. Deletes the caller's
   * in-progress record (fenced); one row when it did, none otherwise. Notifies when a waiter is flagged.
   */
  readonly release: Statement;
  /**
   * `$1` scope, `$2` key. Sets the `waiters` flag of an in-progress record, so its completion or release
   * will NOTIFY; matches nothing once the record is completed or gone. Waits for the row lock of a
   * completion under way, which ends at that completion's COMMIT.
   */
  readonly markWaiting: Statement;
  /** `$1` scope, `$2` key. The record (`RECORD_COLUMNS` of `rows.ts`), or no row. */
  readonly get: Statement;
  /**
   * `$1` now (ms, or `null` for the server's clock), `$2` limit. Deletes up to `$2` expired records not under a live lease, skipping rows
   * another transaction holds, so it never waits on a lock; the row count is how many it deleted.
   */
  readonly reap: Statement;
  /**
   * `$1` scope, `$2` key, `$3` lease token (encoded), `$4` recovery point, `$5` now (ms, or `null` for
   * the server's clock), `$6` the renewed lease (ms). Fenced like `complete`: sets the recovery point and
   * the lease end (now + lease), and stretches the retention to cover the lease (never shortens it), only
   * on the caller's in-progress record; one row (`leaseExpiresAt`) when it did, none otherwise.
   */
  readonly checkpoint: Statement;
  /**
   * `$1` scope, `$2` key, `$3` lease token (encoded), `$4` now (ms, or `null` for the server's clock), `$5`
   * the renewed lease (ms). The keep-alive: fenced like `complete`, sets the lease end (now + lease) and
   * stretches the retention to cover it (never shortens it), keeping the recovery point; one row
   * (`leaseExpiresAt`) when it did, none otherwise.
   */
  readonly renew: Statement;
  /**
   * `$1` now (ms, or `null` for the server's clock), `$2` limit. Up to `$2` in-progress records with a recovery point whose lease ended by
   * `$1` and whose retention has not, oldest lease end first, read through the partial index
   * `records_abandoned_idx` (migration 0004). Columns: scope, key, then `RECORD_COLUMNS`.
   */
  readonly listAbandoned: Statement;
  /**
   * `[now?, limit]` → one row `{ n }`: how many in-progress records (at most `$2`) have a lease that
   * ended by `$1` (the server's clock when null) and a retention that has not. `LIMIT` bounds the scan.
   */
  readonly countExpiredLeases: Statement;
  /** `SELECT 1`: a health check's round trip. */
  readonly ping: Statement;
  /**
   * `$1` state (`'in_progress'`, `'completed'` or `null` for both), `$2` scope (or `null`), `$3` key prefix
   * (or `null`), `$4`/`$5` the (scope, key) to start after (or `null`s), `$6` limit. One page of records with
   * their (scope, key), in primary-key order, so the scan walks the primary key and stops at `$6` rows.
   */
  readonly listRecords: Statement;
  /** `LISTEN` on the schema's channel. */
  readonly listen: string;
  /** `BEGIN` with the isolation level of transactional mode. */
  readonly begin: string;
  /** `$1` a backend's pid. Ends that backend, rolling back its open transaction at once. */
  readonly terminate: string;
}

/**
 * Transactional mode runs at READ COMMITTED (PostgreSQL's default), set explicitly so a server default of
 * REPEATABLE READ or SERIALIZABLE does not change it: the fenced `complete` is an UPDATE whose WHERE is
 * re-checked against the newest committed row version, so it sees a takeover committed after the
 * transaction began, and the handler's own statements keep PostgreSQL's default semantics. A stricter
 * level would turn such a concurrent takeover into a serialization failure instead of a clean fence.
 */
const BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';

/**
 * Builds the statements for a validated schema.
 *
 * @param prepared - whether the parameterised statements are named (prepared once per connection)
 */
export function statements(names: SchemaNames, prepared: boolean): Statements {
  const s = names.quoted;
  const channel = escapeLiteral(names.channel);
  const named = (text: string): Statement => statement(text, prepared);
  // The reaper's and the completer's statements run rarely: planned afresh each time, for the data as it is.
  const unnamed = (text: string): Statement => statement(text, false);
  return Object.freeze({
    ...claimStatements(s, prepared),
    // Hot path: docs/hot-path.md#postgresql-completion
    complete: named(`UPDATE ${s}.records
      SET completed_at = clock.ms, expires_at = clock.ms + $5::bigint, status = $6, headers = $7::json, body = $8, fence = NULL
      FROM (SELECT ${nowOf('$4')} AS ms) AS clock
      WHERE scope = $1 AND key = $2 AND lease_token = $3 AND completed_at IS NULL
      RETURNING CASE WHEN waiters THEN pg_notify(${channel}, $9) END`),
    completedAgain: named(`SELECT FROM ${s}.records WHERE scope = $1 AND key = $2 AND lease_token = $3 AND completed_at IS NOT NULL`),
    release: named(`WITH gone AS (
      DELETE FROM ${s}.records
      WHERE scope = $1 AND key = $2 AND lease_token = $3 AND completed_at IS NULL
      RETURNING waiters)
      SELECT CASE WHEN waiters THEN pg_notify(${channel}, $4) END FROM gone`),
    markWaiting: named(`UPDATE ${s}.records SET waiters = true
      WHERE scope = $1 AND key = $2 AND completed_at IS NULL AND waiters IS NULL`),
    get: named(`SELECT ${RECORD_COLUMNS} FROM ${s}.records WHERE scope = $1 AND key = $2`),
    // The batch is a CTE, evaluated once: an `IN (SELECT … LIMIT … SKIP LOCKED)` subquery may be rescanned
    // by the plan (a nested-loop semi join), each rescan skipping the rows this statement already deleted
    // and locking the next ones, so one call deleted far more than `limit`.
    reap: unnamed(`WITH clock AS (SELECT ${nowOf('$1')} AS ms), doomed AS (
        SELECT scope, key FROM ${s}.records
        WHERE expires_at <= (SELECT ms FROM clock)
          AND (completed_at IS NOT NULL OR lease_expires_at <= (SELECT ms FROM clock))
        ORDER BY expires_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
      DELETE FROM ${s}.records r USING doomed WHERE r.scope = doomed.scope AND r.key = doomed.key`),
    checkpoint: named(`UPDATE ${s}.records
      SET recovery_point = $4, lease_expires_at = clock.ms + $6::bigint, expires_at = GREATEST(expires_at, clock.ms + $6::bigint)
      FROM (SELECT ${nowOf('$5')} AS ms) AS clock
      WHERE scope = $1 AND key = $2 AND lease_token = $3 AND completed_at IS NULL
      RETURNING lease_expires_at AS "leaseExpiresAt"`),
    renew: named(`UPDATE ${s}.records
      SET lease_expires_at = clock.ms + $5::bigint, expires_at = GREATEST(expires_at, clock.ms + $5::bigint)
      FROM (SELECT ${nowOf('$4')} AS ms) AS clock
      WHERE scope = $1 AND key = $2 AND lease_token = $3 AND completed_at IS NULL
      RETURNING lease_expires_at AS "leaseExpiresAt"`),
    listAbandoned: unnamed(`WITH clock AS (SELECT ${nowOf('$1')} AS ms)
      SELECT scope, key, ${RECORD_COLUMNS} FROM ${s}.records
      WHERE completed_at IS NULL AND recovery_point IS NOT NULL AND lease_expires_at <= (SELECT ms FROM clock)
        AND expires_at > (SELECT ms FROM clock)
      ORDER BY lease_expires_at
      LIMIT $2`),
    countExpiredLeases: unnamed(`WITH clock AS (SELECT ${nowOf('$1')} AS ms)
      SELECT count(*)::int AS n FROM (
        SELECT 1 FROM ${s}.records
        WHERE completed_at IS NULL AND lease_expires_at <= (SELECT ms FROM clock) AND expires_at > (SELECT ms FROM clock)
        LIMIT $2) AS expired`),
    ping: unnamed('SELECT 1'),
    listRecords: unnamed(`SELECT scope, key, ${RECORD_COLUMNS} FROM ${s}.records
      WHERE ($1::text IS NULL OR (completed_at IS NULL) = ($1::text = 'in_progress'))
        AND ($2::text IS NULL OR scope = $2::text)
        AND ($3::text IS NULL OR starts_with(key, $3::text))
        AND ($4::text IS NULL OR (scope, key) > ($4::text, $5::text))
      ORDER BY scope, key
      LIMIT $6`),
    listen: `LISTEN ${escapeIdentifier(names.channel)}`,
    begin: BEGIN,
    terminate: 'SELECT pg_terminate_backend($1)',
  });
}

/**
 * `begin` followed, in the same round trip (one simple-protocol query), by server-side bounds of
 * `boundMs` milliseconds (a positive integer) on the transaction: no statement runs longer
 * (`statement_timeout`, which cancels it) and the session never sits idle in the transaction longer
 * (`idle_in_transaction_session_timeout`, which ends the session and so rolls back). `SET LOCAL` ends with
 * the transaction, so the pooled connection keeps its own settings afterwards. They hold even when this
 * process can no longer act (its event loop blocked, its host cut off), so no transaction pins the
 * server's snapshot xmin (which the outbox relay and vacuum wait behind) much past its lease.
 */
export function boundedBegin(begin: string, boundMs: number): string {
  requireDurationMs('boundMs', boundMs, 'boundedBegin');
  return `${begin}; SET LOCAL statement_timeout = ${boundMs}; SET LOCAL idle_in_transaction_session_timeout = ${boundMs}`;
}
