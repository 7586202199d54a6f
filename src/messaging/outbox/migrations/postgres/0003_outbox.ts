/**
 * Migration 0003: the transactional outbox table and its wake-up trigger.
 *
 * Append-only: once released, this text never changes; later changes are new numbered files.
 *
 * Design notes (`src/messaging/outbox/`):
 * - `xid` is the inserting transaction's id (`pg_current_xact_id()`, a 64-bit `xid8` that never wraps).
 *   The relay only takes rows whose `xid` is below the xmin of its snapshot: every such transaction has
 *   ended, so no row can later appear *before* one already published. A serial alone cannot give that:
 *   a transaction that took a lower `seq` may commit after a higher one was published.
 * - `status`: 0 pending, 1 sent, 2 dead-lettered. Pending rows are never skipped, whatever commits late.
 * - `lease_token` / `lease_until` mark a row in flight on one relay; an expired lease (a killed relay) makes
 *   the row claimable again. `attempts` counts claims, so a relay that crash-loops on a message still
 *   dead-letters it.
 * - Times are milliseconds since the epoch from the injected clocks of the outbox and the relay.
 * - `key` uses the "C" collation: byte-wise ordering keys, as in the records table.
 * - A statement-level trigger NOTIFYs `<schema>_outbox` after inserts; the notification is delivered at
 *   COMMIT, and a rolled-back transaction sends none.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  // The channel is the unquoted schema name plus `_outbox`; schema names are validated to [A-Za-z0-9_].
  const channel = `${s.slice(1, -1)}_outbox`;
  return `
CREATE TABLE ${s}.outbox (
  seq          bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid          xid8     NOT NULL DEFAULT pg_current_xact_id(),
  created_at   bigint   NOT NULL,
  available_at bigint   NOT NULL,
  lease_until  bigint,
  sent_at      bigint,
  dead_at      bigint,
  attempts     integer  NOT NULL DEFAULT 0,
  status       smallint NOT NULL DEFAULT 0,
  id           uuid     NOT NULL,
  lease_token  uuid,
  topic        text     NOT NULL,
  key          text     COLLATE "C" NOT NULL,
  headers      jsonb    NOT NULL DEFAULT '{}',
  payload      bytea    NOT NULL,
  last_error   text,
  CONSTRAINT outbox_id_unique UNIQUE (id),
  CONSTRAINT outbox_status_known CHECK (status IN (0, 1, 2))
);

COMMENT ON TABLE ${s}.outbox IS
  'retrysafe transactional outbox. status 0 pending, 1 sent, 2 dead-lettered; times in milliseconds since the epoch.';

-- The relay's path: pending rows per key in publish order.
CREATE INDEX outbox_pending_idx ON ${s}.outbox (key, xid, seq) WHERE status = 0;
-- The cleanup's path: sent rows by age.
CREATE INDEX outbox_sent_idx ON ${s}.outbox (sent_at) WHERE status = 1;
-- Dead letters by age, for inspection and counting.
CREATE INDEX outbox_dead_idx ON ${s}.outbox (dead_at) WHERE status = 2;

CREATE FUNCTION ${s}.outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('${channel}', '');
  RETURN NULL;
END
$fn$;

CREATE TRIGGER outbox_notify AFTER INSERT ON ${s}.outbox
  FOR EACH STATEMENT EXECUTE FUNCTION ${s}.outbox_notify();
`;
}
