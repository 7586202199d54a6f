/**
 * Migration 0010: an index on the sessions' client ids in byte order (`COLLATE "C"`), for the operator
 * console's sessions page (`listSessions`). The page orders by `client_id COLLATE "C"`, as SQLite and
 * Redis order, whatever the database's collation; the primary key's index has the column's own collation
 * (the database's default), so until now each page read and sorted the whole table. With this index a page
 * reads its rows in order, from the previous page's last client id or the searched prefix on, and stops at
 * its limit.
 *
 * Append-only: once released, this text never changes.
 *
 * Not `CREATE INDEX CONCURRENTLY`: `migrate()` runs each migration in a transaction, where PostgreSQL
 * refuses it. The build holds a SHARE lock on `sessions`, which blocks session writes (`create`, `begin`,
 * `keepAlive`, `end`, `reap`) until it ends: one pass over the client ids. `IF NOT EXISTS` lets an operator
 * build the index by hand beforehand, concurrently and under this name, to take no such lock at deploy.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
CREATE INDEX IF NOT EXISTS sessions_client_id_c_idx ON ${s}.sessions (client_id COLLATE "C");
`;
}
