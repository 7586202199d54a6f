/**
 * Client sessions' PostgreSQL migrations. Their numbers belong to the one sequence `migrate()` from
 * `retrysafe/postgres` applies to every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../stores/postgres/migration.js';
import { sql as sessions } from './0005_sessions.js';
import { sql as clientIdC } from './0010_sessions_client_id_c.js';

/**
 * The sessions and their requests, with the functions that lock, advance and begin them; then the index
 * the console's sessions page reads them through, in byte order.
 */
export const SESSIONS_MIGRATIONS: readonly Migration[] = [
  { version: 5, name: '0005_sessions', sql: sessions },
  { version: 10, name: '0010_sessions_client_id_c', sql: clientIdC },
];
