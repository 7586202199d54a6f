/**
 * Migration 0001: the records table, its retention index, and the claim function.
 *
 * Append-only: once released, this text never changes; later changes are new numbered files. It is a
 * TypeScript module rather than a `.sql` file because `tsc` copies no `.sql` into `dist/`, and a string
 * module loads the same way from `src/` (vitest, tsx) and from the published `dist/`.
 *
 * Layout notes (row size is a design target):
 * - Fixed-width columns come first so no alignment padding sits between them.
 * - `fingerprint` and `lease_token` are compact `bytea` (see `codec.ts`): 33 and 17 bytes instead of 64
 *   and 36 characters.
 * - There is no `state` column: a record is `completed` exactly when `completed_at` is set.
 * - No nullable column is set on a completed row, so it carries no null bitmap (8 bytes less header).
 *   There is no `recovery_point` column yet: the store contract has no operation that sets one; the
 *   migration that adds atomic phases adds it.
 * - `scope` and `key` use the "C" collation: byte-wise equality, as keys are case-sensitive, and faster
 *   comparisons in the primary key.
 *
 * The claim is a PL/pgSQL function so that it is one statement and one round trip for the client and
 * still correct under every race: each statement in it sees a fresh snapshot (READ COMMITTED), so the
 * row a concurrent claimer committed after the call began is seen on the next loop turn, where a
 * single `INSERT … ON CONFLICT` plus `SELECT` in one statement would see nothing. A replay only reads: no
 * row lock, no new row version.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE TABLE ${s}.records (
  lease_expires_at bigint   NOT NULL,
  created_at       bigint   NOT NULL,
  expires_at       bigint   NOT NULL,
  completed_at     bigint,
  status           smallint,
  scope            text     COLLATE "C" NOT NULL,
  key              text     COLLATE "C" NOT NULL,
  fingerprint      bytea    NOT NULL,
  lease_token      bytea    NOT NULL,
  headers          json,
  body             bytea,
  PRIMARY KEY (scope, key),
  CONSTRAINT records_completed_has_response CHECK ((completed_at IS NULL) = (status IS NULL))
);

COMMENT ON TABLE ${s}.records IS
  'retrysafe idempotency records, one per (scope, key). Times are milliseconds since the epoch; completed_at IS NOT NULL means completed.';

-- The reaper's path: expired rows in expiry order, without scanning live ones.
CREATE INDEX records_expires_at_idx ON ${s}.records (expires_at);

-- Refuses when the current transaction already wrote: the transactional claim commits the (empty)
-- transaction before claiming and must never commit business writes along with it.
CREATE FUNCTION ${s}.require_empty_transaction() RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'retrysafe: the claim must come before any write in the transaction'
      USING ERRCODE = 'active_sql_transaction';
  END IF;
END
$fn$;

-- claim(scope, key, fingerprint, lease_token, now_ms, lease_ms, retention_ms): inserts the record, or
-- takes it over when its retention expired (any fingerprint) or its lease expired (same fingerprint, still
-- in progress); otherwise returns it unchanged. Exactly one row: acquired, takeover, then the record.
CREATE FUNCTION ${s}.claim(
  p_scope text, p_key text, p_fingerprint bytea, p_lease_token bytea,
  p_now bigint, p_lease_ms bigint, p_retention_ms bigint)
RETURNS TABLE (
  acquired boolean, takeover boolean, fingerprint bytea, lease_token bytea, lease_expires_at bigint,
  created_at bigint, expires_at bigint, completed_at bigint, status smallint,
  headers json, body bytea)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  r ${s}.records%ROWTYPE;
  v_created bigint;
BEGIN
  -- Each turn ends in a RETURN unless a concurrent release, reap or takeover changed the row between two
  -- statements; the next turn sees that change. A handful of turns settles any real race.
  FOR turn IN 1..16 LOOP
    INSERT INTO ${s}.records AS t
      (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at)
    VALUES (p_scope, p_key, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now, p_now + p_retention_ms)
    ON CONFLICT (scope, key) DO NOTHING;
    IF FOUND THEN
      RETURN QUERY SELECT true, false, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now,
        p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea;
      RETURN;
    END IF;

    SELECT * INTO r FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key;
    CONTINUE WHEN NOT FOUND;

    IF r.expires_at <= p_now THEN
      -- Retention over: the key is new again, for any fingerprint.
      UPDATE ${s}.records AS t
      SET fingerprint = p_fingerprint, lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms,
          created_at = p_now, expires_at = p_now + p_retention_ms, completed_at = NULL, status = NULL,
          headers = NULL, body = NULL
      WHERE t.scope = p_scope AND t.key = p_key AND t.expires_at <= p_now;
      IF FOUND THEN
        RETURN QUERY SELECT true, false, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea;
        RETURN;
      END IF;
    ELSIF r.completed_at IS NULL AND r.lease_expires_at <= p_now AND r.fingerprint = p_fingerprint THEN
      -- A crashed holder: take the lease over, keeping created_at.
      UPDATE ${s}.records AS t
      SET lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms, expires_at = p_now + p_retention_ms
      WHERE t.scope = p_scope AND t.key = p_key AND t.completed_at IS NULL AND t.lease_expires_at <= p_now
        AND t.expires_at > p_now AND t.fingerprint = p_fingerprint
      RETURNING t.created_at INTO v_created;
      IF FOUND THEN
        RETURN QUERY SELECT true, true, p_fingerprint, p_lease_token, p_now + p_lease_ms, v_created,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea;
        RETURN;
      END IF;
    ELSE
      RETURN QUERY SELECT false, false, r.fingerprint, r.lease_token, r.lease_expires_at, r.created_at,
        r.expires_at, r.completed_at, r.status, r.headers, r.body;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'retrysafe: the claim of (%, %) kept racing with concurrent changes', p_scope, p_key
    USING ERRCODE = 'serialization_failure';
END
$fn$;
`;
}
