/**
 * The outbox's PostgreSQL migrations. Their numbers belong to the one sequence `migrate()` from
 * `retrysafe/postgres` applies to every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../../stores/postgres/migration.js';
import { sql as outbox } from './0003_outbox.js';
import { sql as outboxWaiting } from './0007_outbox_waiting.js';

/** The outbox table with its wake-up trigger, then the relay's waiting lock, in order. */
export const OUTBOX_MIGRATIONS: readonly Migration[] = [
  { version: 3, name: '0003_outbox', sql: outbox },
  { version: 7, name: '0007_outbox_waiting', sql: outboxWaiting },
];
