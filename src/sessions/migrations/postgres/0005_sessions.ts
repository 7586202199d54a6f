/**
 * Migration 0005: client sessions (`createPostgresSessionStore` in `retrysafe/sessions`), the
 * session-based Idempotent Receiver of *Patterns of Distributed Systems* and Raft (Ongaro's thesis,
 * section 6.3).
 *
 * Append-only: once released, this text never changes.
 *
 * - `sessions` holds one row per client id: `live` until an access finds its lease ended, then an
 *   `expired` tombstone until `reap` deletes it. Times are milliseconds since the epoch (`bigint`), as the
 *   receiver's injected clock gives them.
 * - `session_requests` holds the requests above the low-water mark: in progress under a fencing token, or
 *   completed with the saved response. The foreign key cascades, so deleting a session (`end`, `reap`)
 *   deletes its requests in the same statement.
 * - `session_begin` and `session_keep_alive` are functions so that each is one round trip, and so that
 *   each step runs in a fresh snapshot taken after the session row is locked: a single READ COMMITTED
 *   statement takes its snapshot before it waits for the lock, so it would not see the request rows a
 *   concurrent `begin` committed meanwhile (and could neither replay them nor delete them below the
 *   low-water mark). Locking the session row serialises every `begin` and `keepAlive` of one session.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE TABLE ${s}.sessions (
  client_id        text   PRIMARY KEY,
  state            text   NOT NULL CHECK (state IN ('live', 'expired')),
  lease_expires_at bigint NOT NULL,
  low_water_mark   bigint NOT NULL
);

CREATE INDEX sessions_lease_expires_at_idx ON ${s}.sessions (lease_expires_at);

CREATE TABLE ${s}.session_requests (
  client_id        text   NOT NULL REFERENCES ${s}.sessions (client_id) ON DELETE CASCADE,
  request_number   bigint NOT NULL,
  state            text   NOT NULL CHECK (state IN ('in_progress', 'completed')),
  token            text   NOT NULL,
  lease_expires_at bigint NOT NULL,
  response         text,
  PRIMARY KEY (client_id, request_number)
);

-- Locks the session row; marks it expired (dropping its requests) when its lease has ended.
-- Returns the row's state after that, or 'unknown'.
CREATE FUNCTION ${s}.session_lock(p_client_id text, p_now bigint, OUT o_state text, OUT o_low_water_mark bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_lease_expires_at bigint;
BEGIN
  SELECT state, lease_expires_at, low_water_mark INTO o_state, v_lease_expires_at, o_low_water_mark
    FROM ${s}.sessions WHERE client_id = p_client_id FOR UPDATE;
  IF NOT FOUND THEN
    o_state := 'unknown';
  ELSIF o_state = 'live' AND v_lease_expires_at <= p_now THEN
    UPDATE ${s}.sessions SET state = 'expired' WHERE client_id = p_client_id;
    DELETE FROM ${s}.session_requests WHERE client_id = p_client_id;
    o_state := 'expired';
  END IF;
END
$fn$;

-- Raises the low-water mark (never lowers it), drops the requests at or below it, renews the lease.
CREATE FUNCTION ${s}.session_advance(p_client_id text, p_stored bigint, p_low_water_mark bigint, p_lease_expires_at bigint)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE ${s}.sessions
     SET low_water_mark = greatest(low_water_mark, p_low_water_mark),
         lease_expires_at = greatest(lease_expires_at, p_lease_expires_at)
   WHERE client_id = p_client_id;
  IF p_low_water_mark > p_stored THEN
    DELETE FROM ${s}.session_requests WHERE client_id = p_client_id AND request_number <= p_low_water_mark;
  END IF;
END
$fn$;

CREATE FUNCTION ${s}.session_keep_alive(p_client_id text, p_low_water_mark bigint, p_now bigint, p_lease_ms bigint)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  v_session_state text;
  v_stored bigint;
BEGIN
  SELECT l.o_state, l.o_low_water_mark INTO v_session_state, v_stored FROM ${s}.session_lock(p_client_id, p_now) AS l;
  IF v_session_state <> 'live' THEN
    RETURN v_session_state;
  END IF;
  PERFORM ${s}.session_advance(p_client_id, v_stored, p_low_water_mark, p_now + p_lease_ms);
  RETURN 'ok';
END
$fn$;

CREATE FUNCTION ${s}.session_begin(
  p_client_id text, p_request_number bigint, p_low_water_mark bigint, p_now bigint,
  p_session_lease_ms bigint, p_execution_lease_ms bigint, p_token text
) RETURNS TABLE (o_outcome text, o_low_water_mark bigint, o_takeover boolean, o_response text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_session_state text;
  v_stored bigint;
  v_state text;
  v_lease_expires_at bigint;
  v_response text;
BEGIN
  SELECT l.o_state, l.o_low_water_mark INTO v_session_state, v_stored FROM ${s}.session_lock(p_client_id, p_now) AS l;
  IF v_session_state <> 'live' THEN
    RETURN QUERY SELECT v_session_state, NULL::bigint, NULL::boolean, NULL::text;
    RETURN;
  END IF;
  IF p_request_number <= v_stored THEN
    RETURN QUERY SELECT 'stale'::text, v_stored, NULL::boolean, NULL::text;
    RETURN;
  END IF;
  PERFORM ${s}.session_advance(p_client_id, v_stored, p_low_water_mark, p_now + p_session_lease_ms);
  -- The row lock keeps complete/release from changing the request between this read and the write below.
  SELECT r.state, r.lease_expires_at, r.response INTO v_state, v_lease_expires_at, v_response
    FROM ${s}.session_requests r
   WHERE r.client_id = p_client_id AND r.request_number = p_request_number FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO ${s}.session_requests (client_id, request_number, state, token, lease_expires_at)
    VALUES (p_client_id, p_request_number, 'in_progress', p_token, p_now + p_execution_lease_ms);
    RETURN QUERY SELECT 'execute'::text, NULL::bigint, false, NULL::text;
  ELSIF v_state = 'completed' THEN
    RETURN QUERY SELECT 'replay'::text, NULL::bigint, NULL::boolean, coalesce(v_response, '');
  ELSIF v_lease_expires_at > p_now THEN
    RETURN QUERY SELECT 'in_flight'::text, NULL::bigint, NULL::boolean, NULL::text;
  ELSE
    UPDATE ${s}.session_requests
       SET token = p_token, lease_expires_at = p_now + p_execution_lease_ms
     WHERE client_id = p_client_id AND request_number = p_request_number;
    RETURN QUERY SELECT 'execute'::text, NULL::bigint, true, NULL::text;
  END IF;
END
$fn$;
`;
}
