/**
 * Migration 0014: the side store of large response bodies (`createPostgresResponseBodies`), for a record
 * store whose records cannot hold them (etcd's `responseStore` option). One row per body, keyed by the
 * record's (scope, key) and the fencing token of the claim that completed it; `expires_at` (ms since the
 * epoch, the record store's clock) is what `deleteExpired` sweeps by.
 *
 * Append-only: once released, this text never changes.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE TABLE ${s}.response_bodies (
  scope         text   NOT NULL,
  key           text   NOT NULL,
  fencing_token text   NOT NULL,
  body          bytea  NOT NULL,
  expires_at    bigint NOT NULL,
  PRIMARY KEY (scope, key, fencing_token)
);
CREATE INDEX response_bodies_expires_at ON ${s}.response_bodies (expires_at);
COMMENT ON TABLE ${s}.response_bodies IS
  'Response bodies too large for their record store (etcd), by (scope, key, fencing token of the completing claim).';
`;
}
