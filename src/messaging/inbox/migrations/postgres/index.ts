/**
 * The inbox's PostgreSQL migrations. Their numbers belong to the one sequence `migrate()` from
 * `retrysafe/postgres` applies to every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../../stores/postgres/migration.js';
import { sql as inbox } from './0002_inbox.js';
import { sql as redriveRequestedAt } from './0011_inbox_redrive_requested_at.js';

/** The processed marks and the attempts (dead letters, pending redrives), then the redrive column's rename, in order. */
export const INBOX_MIGRATIONS: readonly Migration[] = [
  { version: 2, name: '0002_inbox', sql: inbox },
  { version: 11, name: '0011_inbox_redrive_requested_at', sql: redriveRequestedAt },
];
