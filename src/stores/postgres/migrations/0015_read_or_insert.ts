/**
 * Migration 0015: `read_or_insert()`, the claim's first step (`claim.ts`), as a function. It reads the
 * record by its primary key and, only when there is none, inserts it (`INSERT … ON CONFLICT DO NOTHING`),
 * so a replay's statement runs no insert at all. Before it, the first step was one SQL statement whose
 * `INSERT` sat in a CTE: PostgreSQL sets up and runs a data-modifying CTE on every execution, whether or
 * not the row exists, and a replay cost the server about 184,000 instructions against 129,000 with this
 * function; a new key's claim 262,000 against 234,000 (`bench/pg-backend-instructions.mjs`).
 *
 * It returns one `json` value, the claim's decision and the record's fields in one array, so the calling
 * statement is a plain `SELECT` of one column (no function scan, no tuple descriptor per call):
 * - `[true, lease_expires_at, fence]` when it inserted (the fence as decimal text);
 * - `[false, stands, lease_expires_at, fingerprint, lease_token, created_at, expires_at, completed_at,
 *   status, headers, recovery_point, body]` for the record as read, the tokens in hex and the body in
 *   base64 (or null); `stands` is true when `claim()` would return the record unchanged: the negation of
 *   a retention that ended, a lease that ended under the same fingerprint, and the owner's own claim again;
 * - NULL when the key had no record but the insert met one (another transaction inserted it after the
 *   read): `claim()` decides then.
 *
 * Append-only: once released, this text never changes.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
-- read_or_insert(scope, key, fingerprint, lease_token, now_ms, lease_ms, retention_ms): see above.
CREATE FUNCTION ${s}.read_or_insert(
  p_scope text, p_key text, p_fingerprint bytea, p_lease_token bytea,
  p_now bigint, p_lease_ms bigint, p_retention_ms bigint)
RETURNS json
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  r ${s}.records%ROWTYPE;
  v_fence bigint;
BEGIN
  SELECT * INTO r FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key;
  IF NOT FOUND THEN
    INSERT INTO ${s}.records AS t (scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at)
    VALUES (p_scope, p_key, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now, p_now + p_retention_ms)
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING t.fence INTO v_fence;
    IF FOUND THEN
      RETURN json_build_array(true, p_now + p_lease_ms, v_fence::text);
    END IF;
    RETURN NULL;
  END IF;
  RETURN json_build_array(false,
    r.expires_at > p_now
      AND NOT (r.completed_at IS NULL AND r.fingerprint = p_fingerprint
               AND (r.lease_expires_at <= p_now OR r.lease_token = p_lease_token)),
    r.lease_expires_at, encode(r.fingerprint, 'hex'), encode(r.lease_token, 'hex'),
    r.created_at, r.expires_at, r.completed_at, r.status, r.headers, r.recovery_point, encode(r.body, 'base64'));
END
$$;
COMMENT ON FUNCTION ${s}.read_or_insert(text, text, bytea, bytea, bigint, bigint, bigint) IS
  'retrysafe: the claim''s first step: the record as read, or inserted when the key had none; NULL leaves the claim to claim().';
`;
}
