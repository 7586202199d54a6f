/**
 * Migration 0011: the inbox's column `replay_requested_at` becomes `redrive_requested_at`, and its index
 * `inbox_attempts_replay_idx` becomes `inbox_attempts_redrive_idx`: "replay" names the HTTP replay of a
 * saved response, "redrive" a dead letter's second run, which is what the column records.
 *
 * Append-only: once released, this text never changes.
 *
 * Both renames change only the catalog (no row is rewritten); `ALTER TABLE` holds an ACCESS EXCLUSIVE lock
 * on `inbox_attempts` for that instant. The partial indexes' predicates follow the column. A consumer of
 * an earlier release still names the old column, so its inbox statements fail from this migration on:
 * stop those consumers first, or deploy the release and migrate together.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
ALTER TABLE ${s}.inbox_attempts RENAME COLUMN replay_requested_at TO redrive_requested_at;

ALTER INDEX ${s}.inbox_attempts_replay_idx RENAME TO inbox_attempts_redrive_idx;

COMMENT ON TABLE ${s}.inbox_attempts IS
  'retrysafe inbox: attempt counts of messages not yet processed, dead letters (dead_lettered_at set) and pending redrives (redrive_requested_at set).';
`;
}
