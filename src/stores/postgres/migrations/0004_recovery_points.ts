/**
 * Migration 0004: recovery points for atomic phases (`checkpoint`, `listAbandoned`, and takeovers that
 * resume where the crashed holder stopped).
 *
 * Append-only: once released, this text never changes.
 *
 * - `recovery_point` is nullable text, added last (after the variable-width columns, so the fixed-width
 *   ones stay unpadded). Adding a nullable column without a default rewrites nothing: existing rows read
 *   it as NULL. A row with a NULL in it carries a null bitmap, so a completed record that never used
 *   phases is 8 bytes larger than under 0001 (see the storage test for the measured size).
 * - `records_abandoned_idx` is partial: it holds only in-progress rows with a recovery point, the rows
 *   `listAbandoned` looks for, ordered by lease expiry as it reads them. Ordinary records never enter it,
 *   so it costs nothing on the claim/complete path of an operation without phases. It is built by a plain
 *   `CREATE INDEX` (a migration runs in a transaction, which `CONCURRENTLY` cannot): on a large table,
 *   writes wait while it is built.
 * - `claim()` is replaced: its result row gains `recovery_point` (a takeover hands the previous holder's
 *   recovery point to the new one; a key whose retention expired starts without one). PostgreSQL cannot
 *   change a function's result columns with `CREATE OR REPLACE`, so the function is dropped and created
 *   again; both happen in this migration's transaction, so other sessions see either the old function or
 *   the new one.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
ALTER TABLE ${s}.records ADD COLUMN recovery_point text;

COMMENT ON COLUMN ${s}.records.recovery_point IS
  'retrysafe atomic phases: the last recovery point the operation reached (opaque text), kept on takeover and completion.';

-- listAbandoned's path: abandoned multi-phase records, oldest lease first.
CREATE INDEX records_abandoned_idx ON ${s}.records (lease_expires_at)
  WHERE completed_at IS NULL AND recovery_point IS NOT NULL;

DROP FUNCTION ${s}.claim(text, text, bytea, bytea, bigint, bigint, bigint);

-- claim(scope, key, fingerprint, lease_token, now_ms, lease_ms, retention_ms): as in 0001, plus the
-- recovery point: a lease takeover keeps it and returns it, an expired retention clears it, and a refused
-- claim returns the standing record's. Exactly one row: acquired, takeover, then the record.
CREATE FUNCTION ${s}.claim(
  p_scope text, p_key text, p_fingerprint bytea, p_lease_token bytea,
  p_now bigint, p_lease_ms bigint, p_retention_ms bigint)
RETURNS TABLE (
  acquired boolean, takeover boolean, fingerprint bytea, lease_token bytea, lease_expires_at bigint,
  created_at bigint, expires_at bigint, completed_at bigint, status smallint,
  headers json, body bytea, recovery_point text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  r ${s}.records%ROWTYPE;
  v_created bigint;
  v_point text;
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
        p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, NULL::text;
      RETURN;
    END IF;

    SELECT * INTO r FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key;
    CONTINUE WHEN NOT FOUND;

    IF r.expires_at <= p_now THEN
      -- Retention over: the key is new again, for any fingerprint, and starts with no recovery point.
      UPDATE ${s}.records AS t
      SET fingerprint = p_fingerprint, lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms,
          created_at = p_now, expires_at = p_now + p_retention_ms, completed_at = NULL, status = NULL,
          headers = NULL, body = NULL, recovery_point = NULL
      WHERE t.scope = p_scope AND t.key = p_key AND t.expires_at <= p_now;
      IF FOUND THEN
        RETURN QUERY SELECT true, false, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, NULL::text;
        RETURN;
      END IF;
    ELSIF r.completed_at IS NULL AND r.lease_expires_at <= p_now AND r.fingerprint = p_fingerprint THEN
      -- A crashed holder, or one that handed its lease back at a recovery point: take the lease over,
      -- keeping created_at and the recovery point. The branch itself says "takeover", so a takeover in the
      -- same millisecond as a zero-lease hand-back is still reported as one.
      UPDATE ${s}.records AS t
      SET lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms, expires_at = p_now + p_retention_ms
      WHERE t.scope = p_scope AND t.key = p_key AND t.completed_at IS NULL AND t.lease_expires_at <= p_now
        AND t.expires_at > p_now AND t.fingerprint = p_fingerprint
      RETURNING t.created_at, t.recovery_point INTO v_created, v_point;
      IF FOUND THEN
        RETURN QUERY SELECT true, true, p_fingerprint, p_lease_token, p_now + p_lease_ms, v_created,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, v_point;
        RETURN;
      END IF;
    ELSE
      RETURN QUERY SELECT false, false, r.fingerprint, r.lease_token, r.lease_expires_at, r.created_at,
        r.expires_at, r.completed_at, r.status, r.headers, r.body, r.recovery_point;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'retrysafe: the claim of (%, %) kept racing with concurrent changes', p_scope, p_key
    USING ERRCODE = 'serialization_failure';
END
$fn$;
`;
}
