/**
 * Migration 0002: the inbox (idempotent consumer) tables, used by `retrysafe/inbox`.
 *
 * Append-only: once released, this text never changes.
 *
 * - `inbox_processed` holds one mark per (consumer, message id), inserted in the handler's own transaction;
 *   its primary key is what makes two concurrent deliveries commit once. Fixed-width column first.
 * - `inbox_attempts` holds a row only while a message is being retried, is dead-lettered, or awaits a
 *   replay: attempts are counted in a statement committed before the handler's transaction, so a crash
 *   inside the handler still leaves the count. Headers and body are saved only on dead-lettering.
 * - Times are milliseconds since the epoch from the inbox's clock. Names use the "C" collation
 *   (byte-wise equality, as ids are case-sensitive).
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE TABLE ${s}.inbox_processed (
  processed_at bigint NOT NULL,
  consumer     text   COLLATE "C" NOT NULL,
  message_id   text   COLLATE "C" NOT NULL,
  PRIMARY KEY (consumer, message_id)
);

COMMENT ON TABLE ${s}.inbox_processed IS
  'retrysafe inbox: messages each consumer has processed (committed with the handler''s writes). Times in ms since the epoch.';

-- The cleanup's path: old marks in age order.
CREATE INDEX inbox_processed_at_idx ON ${s}.inbox_processed (processed_at);

CREATE TABLE ${s}.inbox_attempts (
  attempts            integer NOT NULL,
  first_attempt_at    bigint  NOT NULL,
  last_attempt_at     bigint  NOT NULL,
  dead_lettered_at    bigint,
  replay_requested_at bigint,
  consumer            text    COLLATE "C" NOT NULL,
  message_id          text    COLLATE "C" NOT NULL,
  last_error          text,
  headers             json,
  body                bytea,
  PRIMARY KEY (consumer, message_id)
);

COMMENT ON TABLE ${s}.inbox_attempts IS
  'retrysafe inbox: attempt counts of messages not yet processed, dead letters (dead_lettered_at set) and pending replays.';

CREATE INDEX inbox_attempts_dead_idx ON ${s}.inbox_attempts (dead_lettered_at) WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX inbox_attempts_replay_idx ON ${s}.inbox_attempts (consumer, replay_requested_at) WHERE replay_requested_at IS NOT NULL;
CREATE INDEX inbox_attempts_abandoned_idx ON ${s}.inbox_attempts (last_attempt_at)
  WHERE dead_lettered_at IS NULL AND replay_requested_at IS NULL;
`;
}
