/**
 * The PostgreSQL migrations of `retrysafe/events`. Their numbers belong to the one sequence `migrate()`
 * from `retrysafe/postgres` applies to every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../stores/postgres/migration.js';
import { sql as events } from './0012_events.js';

/** The events table. */
export const EVENTS_MIGRATIONS: readonly Migration[] = [{ version: 12, name: '0012_events', sql: events }];
