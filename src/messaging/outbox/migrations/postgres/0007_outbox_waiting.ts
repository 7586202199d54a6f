/**
 * Migration 0007: an enqueue NOTIFYs only while a relay waits for rows.
 *
 * Append-only: once released, this text never changes.
 *
 * Until now every transaction that enqueued NOTIFYed, and a transaction that NOTIFYs takes one
 * server-wide lock at COMMIT and holds it through its WAL flush (PostgreSQL's `PreCommit_Notify`; see
 * migration 0006), so concurrent enqueuing transactions committed one at a time. A relay that is busy
 * claiming needs no wake-up, and without a relay nobody listens. `npm run bench` measures the difference
 * (docs/benchmarks.md): 16 writers committing a business INSERT plus an enqueue ran at 2,700
 * transactions/s with no relay waiting, against 1,609 with one waiting (every commit notifying).
 *
 * The signal is a session-level advisory lock, which is not subject to MVCC: a writer sees the relay's
 * state at the instant its trigger runs, whatever its isolation level and snapshot.
 * - A relay that is about to wait takes the lock exclusively on its LISTEN connection
 *   (`outbox_relay_wait()`), and gives it back when it wakes and finds rows (`outbox_relay_busy()`). The
 *   lock goes with the connection, so a relay that dies or loses its connection stops holding it.
 * - The enqueue trigger tries the lock in shared mode for the rest of its transaction. When a relay holds
 *   it, the try fails and the transaction NOTIFYs, as before. Otherwise the transaction holds the shared
 *   lock until it ends, so no relay can start waiting in between, and sends no NOTIFY.
 * - So a relay that starts waiting knows that every transaction whose enqueue did not NOTIFY has ended. It
 *   still has to claim their rows: `outbox_relay_wait()` returns the xmax of a snapshot taken once the lock
 *   is held (every such transaction's id is below it, since a transaction has an id before its insert
 *   fires the trigger), and the relay claims until the snapshot xmin has passed it before it sleeps.
 *
 * The lock's key is (1920168034, hashtext(channel)): the first number spells "rstb" in ASCII, so it
 * stays apart from other users of two-key advisory locks, and the second is per outbox schema.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  // The channel of migration 0003: the unquoted schema name plus `_outbox` (names are [A-Za-z0-9_]).
  const channel = `${s.slice(1, -1)}_outbox`;
  const key = `1920168034, hashtext('${channel}')`;
  return `
CREATE OR REPLACE FUNCTION ${s}.outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT pg_try_advisory_xact_lock_shared(${key}) THEN
    PERFORM pg_notify('${channel}', '');
  END IF;
  RETURN NULL;
END
$fn$;

-- Called by a relay on its LISTEN connection before it waits: NULL when it could not take the lock (another
-- relay waits, or a transaction that enqueued without notifying is still open); else the horizon, the
-- xmax of a snapshot taken after the lock was taken. Each statement of a volatile function gets its own
-- snapshot, so the RETURN reads one taken after pg_try_advisory_lock.
CREATE FUNCTION ${s}.outbox_relay_wait() RETURNS xid8
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT pg_try_advisory_lock(${key}) THEN
    RETURN NULL;
  END IF;
  RETURN pg_snapshot_xmax(pg_current_snapshot());
END
$fn$;

-- Called by a waiting relay that woke and found rows: gives the lock back (true when it was held).
CREATE FUNCTION ${s}.outbox_relay_busy() RETURNS boolean
LANGUAGE sql AS $fn$ SELECT pg_advisory_unlock(${key}) $fn$;
`;
}
