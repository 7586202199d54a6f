/**
 * The inbox's PostgreSQL migrations. Their numbers belong to the one sequence `migrate()` from
 * `retrysafe/postgres` applies to every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../../stores/postgres/migration.js';
import { sql as inbox } from './0002_inbox.js';

/** The processed marks and the attempts (dead letters, pending redrives), in order. */
export const INBOX_MIGRATIONS: readonly Migration[] = [{ version: 2, name: '0002_inbox', sql: inbox }];
