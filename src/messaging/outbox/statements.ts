/**
 * The runtime SQL of the outbox, one statement per operation, built once per schema from the quoted
 * schema name. Each statement's `$1…$n` are documented where it is defined. Times are milliseconds since
 * the epoch, passed in from the injected clocks. The table is created by migration `0003_outbox`.
 *
 * @module
 */

/**
 * The values of an outbox row's `status` column, which migration `0003_outbox` stores as a `smallint`
 * (`CHECK (status IN (0, 1, 2))`; the partial indexes read `status = 0` and `status = 1`): `pending` (0,
 * not yet sent, leased or not), `sent` (1, the broker confirmed it; the reaper deletes it after the
 * retention), `deadLettered` (2, failed for good; `redrive` makes it pending again). The statements
 * interpolate these constants, so their text stays what the indexes' predicates match.
 */
export const OUTBOX_STATUS = Object.freeze({ pending: 0, sent: 1, deadLettered: 2 } as const);

/** One value of {@link OUTBOX_STATUS}: how an outbox row's `status` column reads. */
export type OutboxRowStatus = (typeof OUTBOX_STATUS)[keyof typeof OUTBOX_STATUS];

const PENDING: OutboxRowStatus = OUTBOX_STATUS.pending;
const SENT: OutboxRowStatus = OUTBOX_STATUS.sent;
const DEAD: OutboxRowStatus = OUTBOX_STATUS.deadLettered;

/**
 * A claimed row as the claim's `RETURNING` list reads it: each column under the field name `relay.ts`
 * uses (`created_at` as `createdAt`); `bigint` columns arrive as decimal strings.
 */
export interface ClaimedRow {
  readonly seq: string;
  readonly xid: string;
  readonly id: string;
  readonly topic: string;
  readonly key: string;
  readonly headers: Record<string, string>;
  readonly payload: Buffer;
  readonly attempts: number;
  readonly createdAt: string;
}

/** The statements for one schema. */
export interface OutboxStatements {
  /**
   * `$1` id (uuid), `$2` topic, `$3` key, `$4` headers (JSON text), `$5` payload (bytea), `$6` now (ms).
   * Inserts a pending row; a row with the same id already there is kept as is (a derived id written twice
   * is the same message).
   */
  readonly enqueue: string;
  /**
   * `$1` now (ms), `$2` lease end (ms), `$3` lease token (uuid), `$4` batch limit, `$5` per-key limit.
   * Claims, for each key whose oldest pending row is free (not leased, not backing off), that row and up to
   * `$5 - 1` following ones of the key, at most `$4` rows in all, oldest transactions first; counts an
   * attempt on each. Only rows whose inserting transaction is below the snapshot's xmin are eligible.
   * Rows locked by a concurrent claim are skipped (`SKIP LOCKED`), and a key whose head was skipped keeps
   * none of its rows, so a key is never published out of order by two relays.
   */
  readonly claim: string;
  /** `$1` seqs (bigint[]), `$2` lease token, `$3` now (ms). Marks the caller's leased rows sent. */
  readonly markSent: string;
  /**
   * `$1` seq, `$2` lease token, `$3` now (ms), `$4` error text, `$5` dead-letter (boolean), `$6` next
   * attempt time (ms). Records a failed attempt on the caller's leased row: dead-letters it, or makes it
   * available again at `$6`. One row (`status`) when the lease was still the caller's.
   */
  readonly fail: string;
  /**
   * `$1` seqs (bigint[]), `$2` lease token. Gives the caller's leased, unpublished rows back, uncounting
   * the attempt their claim counted.
   */
  readonly release: string;
  /**
   * `$1` now (ms), `$2` latency window start (ms). One row, under the names of `OutboxStatus`'s fields
   * where it holds the same quantity: `pending`, `oldestPendingCreatedAt` (ms or null), `inFlight` (live
   * leases), `deadLetters`, `sent`, `retrying` (pending rows that failed at least once),
   * `oldestPendingError` (the last error of the oldest pending row that has one, or null), and
   * `latencyP50Ms`/`latencyP99Ms` (enqueue-to-sent milliseconds of rows sent since `$2`; null when none).
   */
  readonly status: string;
  /**
   * `$1` cutoff (ms), `$2` limit. Deletes up to `$2` rows *sent* before `$1`, oldest first, skipping rows
   * another transaction holds; the row count is how many it deleted. Never touches pending or dead rows.
   */
  readonly reap: string;
  /**
   * `$1` limit. Dead-lettered rows, oldest first, under the names of `OutboxDeadLetter`'s fields
   * (`last_error` as `error`, `created_at` as `createdAt`, `dead_at` as `deadLetteredAt`).
   */
  readonly deadLetters: string;
  /** `$1` id, `$2` now (ms). Makes a dead-lettered row pending again with zero attempts; one row when it did. */
  readonly redrive: string;
  /** `LISTEN` on the outbox's channel. */
  readonly listen: string;
  /**
   * Run on the relay's LISTEN connection before it waits: takes the outbox's waiting lock (migration
   * `0007_outbox_waiting`). One row, `horizon`: null when the lock was not free, else (as text) the xmax of
   * a snapshot taken once it was held.
   */
  readonly relayWait: string;
  /** Run on the LISTEN connection by a waiting relay that found rows: gives the waiting lock back. */
  readonly relayBusy: string;
  /** `$1` horizon (xid8 as text). One row, `passed`: whether every transaction below `$1` has ended. */
  readonly horizonPassed: string;
}

/**
 * Builds the statements for a schema.
 *
 * @param quoted - the schema as a quoted identifier (validated by `schemaNames`)
 * @param channel - the NOTIFY channel of migration `0003_outbox`: `<schema>_outbox`
 */
export function outboxStatements(quoted: string, channel: string): OutboxStatements {
  const t = `${quoted}.outbox`;
  return Object.freeze({
    enqueue: `INSERT INTO ${t} (id, topic, key, headers, payload, created_at, available_at)
      VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6) ON CONFLICT (id) DO NOTHING`,
    // One pass over the pending rows (a window per key, no self-join), so the plan stays linear whatever
    // the table's statistics say.
    claim: `WITH ranked AS (
        SELECT seq, xid, key, rn FROM (
          SELECT seq, xid, key,
                 row_number() OVER w AS rn,
                 first_value(COALESCE(lease_until <= $1, true) AND available_at <= $1) OVER w AS head_free
          FROM ${t}
          WHERE status = ${PENDING} AND xid < pg_snapshot_xmin(pg_current_snapshot())
          WINDOW w AS (PARTITION BY key ORDER BY xid, seq)
        ) w
        WHERE head_free AND rn <= $5
      ), picked AS (
        SELECT o.seq, r.key, r.rn
        FROM ranked r JOIN ${t} o ON o.seq = r.seq
        WHERE o.status = ${PENDING} AND (o.lease_until IS NULL OR o.lease_until <= $1)
        ORDER BY r.xid, r.seq
        LIMIT $4
        FOR UPDATE OF o SKIP LOCKED
      ), kept AS (
        SELECT seq FROM (
          SELECT seq, rn, row_number() OVER (PARTITION BY key ORDER BY rn) AS k FROM picked
        ) p WHERE rn = k
      )
      UPDATE ${t} o SET lease_token = $3, lease_until = $2, attempts = o.attempts + 1
      FROM kept WHERE o.seq = kept.seq
      RETURNING o.seq, o.xid::text AS xid, o.id, o.topic, o.key, o.headers, o.payload, o.attempts, o.created_at AS "createdAt"`,
    markSent: `UPDATE ${t} SET status = ${SENT}, sent_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL
      WHERE seq = ANY($1::bigint[]) AND lease_token = $2 AND status = ${PENDING}`,
    fail: `UPDATE ${t} SET lease_token = NULL, lease_until = NULL, last_error = $4,
        status = CASE WHEN $5::boolean THEN ${DEAD} ELSE ${PENDING} END,
        dead_at = CASE WHEN $5::boolean THEN $3::bigint END,
        available_at = $6
      WHERE seq = $1 AND lease_token = $2 AND status = ${PENDING}
      RETURNING status`,
    release: `UPDATE ${t} SET lease_token = NULL, lease_until = NULL, attempts = attempts - 1
      WHERE seq = ANY($1::bigint[]) AND lease_token = $2 AND status = ${PENDING}`,
    status: `SELECT
        (SELECT count(*) FROM ${t} WHERE status = ${PENDING})::bigint AS pending,
        (SELECT min(created_at) FROM ${t} WHERE status = ${PENDING}) AS "oldestPendingCreatedAt",
        (SELECT count(*) FROM ${t} WHERE status = ${PENDING} AND lease_until > $1)::bigint AS "inFlight",
        (SELECT count(*) FROM ${t} WHERE status = ${DEAD})::bigint AS "deadLetters",
        (SELECT count(*) FROM ${t} WHERE status = ${SENT})::bigint AS sent,
        (SELECT count(*) FROM ${t} WHERE status = ${PENDING} AND attempts > 0)::bigint AS retrying,
        (SELECT last_error FROM ${t} WHERE status = ${PENDING} AND last_error IS NOT NULL ORDER BY created_at, seq LIMIT 1) AS "oldestPendingError",
        l.p[1] AS "latencyP50Ms", l.p[2] AS "latencyP99Ms"
      FROM (
        SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY sent_at - created_at) AS p
        FROM ${t} WHERE status = ${SENT} AND sent_at >= $2
      ) l`,
    // The batch is a CTE (materialized, as it locks rows): an \`IN (SELECT … LIMIT)\` subquery may be
    // rescanned by the plan and delete more than the limit.
    reap: `WITH batch AS (
        SELECT seq FROM ${t} WHERE status = ${SENT} AND sent_at < $1 ORDER BY sent_at LIMIT $2 FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${t} o USING batch WHERE o.seq = batch.seq AND o.status = ${SENT}`,
    deadLetters: `SELECT id, topic, key, headers, payload, attempts, last_error AS error, created_at AS "createdAt", dead_at AS "deadLetteredAt"
      FROM ${t} WHERE status = ${DEAD} ORDER BY dead_at, seq LIMIT $1`,
    redrive: `UPDATE ${t} SET status = ${PENDING}, attempts = 0, dead_at = NULL, available_at = $2
      WHERE id = $1 AND status = ${DEAD} RETURNING seq`,
    listen: `LISTEN "${channel}"`,
    relayWait: `SELECT ${quoted}.outbox_relay_wait()::text AS horizon`,
    relayBusy: `SELECT ${quoted}.outbox_relay_busy()`,
    horizonPassed: `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8 AS passed`,
  });
}

/** Each outbox's statements, kept off its public interface; the relay reads them through {@link statementsOf}. */
const STATEMENTS = new WeakMap<object, OutboxStatements>();

/** Records `sql` as the statements of `outbox` (`createOutbox` calls it once) and returns `outbox`. */
export function bindStatements<T extends object>(outbox: T, sql: OutboxStatements): T {
  STATEMENTS.set(outbox, sql);
  return outbox;
}

/** The statements of an outbox `createOutbox` made; `undefined` for any other object. */
export function statementsOf(outbox: object): OutboxStatements | undefined {
  return STATEMENTS.get(outbox);
}
