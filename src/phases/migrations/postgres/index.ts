/**
 * Atomic phases' PostgreSQL migrations: recovery points on the idempotency records. Their numbers belong
 * to the one sequence `migrate()` from `retrysafe/postgres` applies to every module
 * (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../../../stores/postgres/migration.js';
import { sql as recoveryPoints } from './0004_recovery_points.js';

/** The `recovery_point` column, the index of abandoned records, and the claim that hands points over. */
export const PHASES_MIGRATIONS: readonly Migration[] = [{ version: 4, name: '0004_recovery_points', sql: recoveryPoints }];
