/**
 * Migration 0013: every claim carries a monotonic fencing token, for the resources the work writes to
 * (`fencedUpdate`, the `Fencing-Token` header). The token is a number from the schema's sequence
 * `records_fence_seq`, kept in the record's new `fence` column while the claim is in progress (the
 * store's `complete` clears it): a new record takes one (the column's default), and `claim()` takes a
 * fresh one for every takeover (retention over, lease over), so a later claim of a key always carries a
 * larger token than an earlier one, after a release or a reap too (the sequence outlives the row). The
 * owner's own claim again keeps its token.
 *
 * Append-only: once released, this text never changes.
 *
 * - The sequence has `CACHE 1` (PostgreSQL's default, stated because it matters): with a cache per
 *   session, two sessions would hand out numbers out of the order they claimed in. `nextval` is not
 *   rolled back with its transaction, so numbers may be skipped, never handed out twice.
 * - The column is added without a default, then given one: a volatile default in `ADD COLUMN` would
 *   rewrite the whole table under an exclusive lock. Records claimed before this migration keep a NULL
 *   `fence` (their claims carry no token) until they are claimed again.
 * - `claim()` gains a result column (`fence`), which `CREATE OR REPLACE` cannot add: it is dropped and
 *   created again in the same transaction, with the same arguments. Statements prepared on it are planned
 *   again by name; a process from before this migration reads the columns it names and ignores `fence`.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE SEQUENCE ${s}.records_fence_seq AS bigint CACHE 1 NO CYCLE;
ALTER TABLE ${s}.records ADD COLUMN fence bigint;
ALTER SEQUENCE ${s}.records_fence_seq OWNED BY ${s}.records.fence;
ALTER TABLE ${s}.records ALTER COLUMN fence SET DEFAULT nextval('${s}.records_fence_seq');
COMMENT ON COLUMN ${s}.records.fence IS
  'The fencing token of the record''s claim in progress (NULL once completed): larger for every later claim of the key, from records_fence_seq.';

DROP FUNCTION ${s}.claim(text, text, bytea, bytea, bigint, bigint, bigint);

-- claim(scope, key, fingerprint, lease_token, now_ms, lease_ms, retention_ms): as in 0009, plus the
-- fencing token. Exactly one row: acquired, takeover, the record, then its fence.
CREATE FUNCTION ${s}.claim(
  p_scope text, p_key text, p_fingerprint bytea, p_lease_token bytea,
  p_now bigint, p_lease_ms bigint, p_retention_ms bigint)
RETURNS TABLE (
  acquired boolean, takeover boolean, fingerprint bytea, lease_token bytea, lease_expires_at bigint,
  created_at bigint, expires_at bigint, completed_at bigint, status smallint,
  headers json, body bytea, recovery_point text, fence bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  r ${s}.records%ROWTYPE;
  v_created bigint;
  v_point text;
  v_fence bigint;
BEGIN
  -- Each turn ends in a RETURN unless a concurrent release, reap or takeover changed the row between two
  -- statements; the next turn sees that change. A handful of turns settles any real race.
  FOR turn IN 1..16 LOOP
    INSERT INTO ${s}.records AS t
      (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at)
    VALUES (p_scope, p_key, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now, p_now + p_retention_ms)
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING t.fence INTO v_fence;
    IF FOUND THEN
      RETURN QUERY SELECT true, false, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now,
        p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, NULL::text, v_fence;
      RETURN;
    END IF;

    SELECT * INTO r FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key;
    CONTINUE WHEN NOT FOUND;

    IF r.expires_at <= p_now THEN
      -- Retention over: the key is new again, for any fingerprint, starts with no recovery point, and
      -- takes a new fencing token.
      UPDATE ${s}.records AS t
      SET fingerprint = p_fingerprint, lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms,
          created_at = p_now, expires_at = p_now + p_retention_ms, completed_at = NULL, status = NULL,
          headers = NULL, body = NULL, recovery_point = NULL, fence = nextval('${s}.records_fence_seq')
      WHERE t.scope = p_scope AND t.key = p_key AND t.expires_at <= p_now
      RETURNING t.fence INTO v_fence;
      IF FOUND THEN
        RETURN QUERY SELECT true, false, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, NULL::text, v_fence;
        RETURN;
      END IF;
    ELSIF r.completed_at IS NULL AND r.lease_token = p_lease_token AND r.fingerprint = p_fingerprint THEN
      -- The caller's own claim again (its owner token is the lease token): the first one committed but its
      -- reply was lost. It still holds the lease and its fencing token, unchanged.
      RETURN QUERY SELECT true, false, r.fingerprint, r.lease_token, r.lease_expires_at, r.created_at,
        r.expires_at, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, r.recovery_point, r.fence;
      RETURN;
    ELSIF r.completed_at IS NULL AND r.lease_expires_at <= p_now AND r.fingerprint = p_fingerprint THEN
      -- A crashed holder, or one that handed its lease back at a recovery point: take the lease over,
      -- keeping created_at and the recovery point, with a new fencing token. The branch itself says
      -- "takeover", so a takeover in the same millisecond as a zero-lease hand-back is still reported as one.
      UPDATE ${s}.records AS t
      SET lease_token = p_lease_token, lease_expires_at = p_now + p_lease_ms, expires_at = p_now + p_retention_ms,
          fence = nextval('${s}.records_fence_seq')
      WHERE t.scope = p_scope AND t.key = p_key AND t.completed_at IS NULL AND t.lease_expires_at <= p_now
        AND t.expires_at > p_now AND t.fingerprint = p_fingerprint
      RETURNING t.created_at, t.recovery_point, t.fence INTO v_created, v_point, v_fence;
      IF FOUND THEN
        RETURN QUERY SELECT true, true, p_fingerprint, p_lease_token, p_now + p_lease_ms, v_created,
          p_now + p_retention_ms, NULL::bigint, NULL::smallint, NULL::json, NULL::bytea, v_point, v_fence;
        RETURN;
      END IF;
    ELSE
      RETURN QUERY SELECT false, false, r.fingerprint, r.lease_token, r.lease_expires_at, r.created_at,
        r.expires_at, r.completed_at, r.status, r.headers, r.body, r.recovery_point, r.fence;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'retrysafe: the claim of (%, %) kept racing with concurrent changes', p_scope, p_key
    USING ERRCODE = 'serialization_failure';
END
$fn$;
`;
}
