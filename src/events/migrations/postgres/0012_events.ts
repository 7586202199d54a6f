/**
 * Migration 0012: the event streams of `retrysafe/events`. One row per event: its stream and version
 * (unique together: one event per version), its id (unique per stream: the idempotency of appends), a
 * global position, its type, data and metadata, and the hash of its content (type, data, metadata), which
 * tells a repeated append from a key reused for other events.
 *
 * @module
 */

/** The SQL for the schema `s` (an already quoted identifier). */
export const sql = (s: string): string => `
CREATE TABLE ${s}.events (
  position     bigserial   PRIMARY KEY,
  stream       text        NOT NULL,
  version      bigint      NOT NULL CHECK (version >= 0),
  event_id     uuid        NOT NULL,
  type         text        NOT NULL,
  data         jsonb       NOT NULL,
  metadata     jsonb       NOT NULL,
  content_hash text        NOT NULL,
  appended_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT events_stream_version UNIQUE (stream, version),
  CONSTRAINT events_stream_event_id UNIQUE (stream, event_id)
);
`;
