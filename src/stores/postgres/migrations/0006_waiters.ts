/**
 * Migration 0006: a record says whether anyone waits for it, so completions NOTIFY only when someone
 * listens.
 *
 * Append-only: once released, this text never changes.
 *
 * A transaction that has called NOTIFY takes one server-wide lock at COMMIT and holds it until the commit
 * is done, WAL flush included, so that notifications enter the queue in commit order (PostgreSQL's
 * `PreCommit_Notify` in `src/backend/commands/async.c`: "Serialize writers by acquiring a special lock that
 * we hold till after commit"; Recall.ai, "Postgres LISTEN/NOTIFY does not scale", 2025). When every
 * `complete` notified, completions committed one flush at a time, and group commit, which lets concurrent
 * commits share one flush, could not help. Measured in `npm run bench` (docs/benchmarks.md).
 *
 * - `waiters` is set by `waitFor` (a `wait`-mode duplicate) before it reads the record; `complete` and
 *   `release` notify only when it is set. `waitFor` subscribes (LISTEN) before it sets the flag, and the
 *   flag's UPDATE and the completion's UPDATE lock the same row, so one of two orders holds: the flag is
 *   committed first, and the completion sees it and notifies; or the completion is committed first, and
 *   the flag's UPDATE matches nothing (the record is no longer in progress) and the read that follows sees
 *   the completed record.
 * - The flag is a nullable `boolean`, NULL until a waiter sets it to true. A NULL is one bit in the row's
 *   null bitmap, which every record that never used atomic phases already carries (its `recovery_point` is
 *   NULL), so an unawaited record stays the size it was (the storage test measures it). Adding a nullable
 *   column without a default rewrites nothing.
 * - The flag is not indexed, so setting it can be a HOT update.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
ALTER TABLE ${s}.records ADD COLUMN waiters boolean;

COMMENT ON COLUMN ${s}.records.waiters IS
  'retrysafe: true once a waitFor (wait-mode duplicate) waits for this record, NULL before; complete and release NOTIFY only when true.';
`;
}
