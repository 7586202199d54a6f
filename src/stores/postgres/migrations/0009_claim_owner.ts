/**
 * Migration 0009: the claim knows its owner. A claim presenting the lease token of the standing
 * in-progress record (same fingerprint) is the caller's own claim sent again after an indeterminate
 * failure (the connection dropped after the claim committed, before its reply arrived): `claim()` now
 * answers it `acquired` with the record's lease unchanged, where it answered "in progress" until the lease
 * expired. Lease tokens are random per claim attempt, so no other caller presents one.
 *
 * Append-only: once released, this text never changes.
 *
 * `CREATE OR REPLACE` keeps the function's signature and result columns (those of 0004), so statements
 * prepared before the migration keep working.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
-- claim(scope, key, fingerprint, lease_token, now_ms, lease_ms, retention_ms): as in 0004, plus the
-- owner's own claim sent again. Exactly one row: acquired, takeover, then the record.
CREATE OR REPLACE FUNCTION ${s}.claim(
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
    ELSIF r.completed_at IS NULL AND r.lease_token = p_lease_token AND r.fingerprint = p_fingerprint THEN
      -- The caller's own claim again (its owner token is the lease token): the first one committed but its
      -- reply was lost. It still holds the lease, unchanged; answering it "in progress" would make the
      -- request wait out its own lease.
      RETURN QUERY SELECT true, false, r.fingerprint, r.lease_token, r.lease_expires_at, r.created_at,
        r.expires_at, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, r.recovery_point;
      RETURN;
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
