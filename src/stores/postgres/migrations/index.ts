/**
 * The one sequence of PostgreSQL migrations, gathered from the modules that own them:
 *
 * | module | its list |
 * | --- | --- |
 * | idempotency records | `stores/postgres/migrations/idempotency.ts` |
 * | inbox | `messaging/inbox/migrations/postgres/index.ts` |
 * | outbox | `messaging/outbox/migrations/postgres/index.ts` |
 * | atomic phases | `phases/migrations/postgres/index.ts` |
 * | client sessions | `sessions/migrations/postgres/index.ts` |
 *
 * Numbers are shared, not per module: `migrate()` applies the migrations in number order and records each
 * in the one ledger, `<schema>.schema_migrations`. A new migration takes the next free number, lives in its
 * module's folder and is appended to its module's list; released migrations never change, because the
 * ledger records them as applied.
 *
 * @module
 */
import type { Migration } from '../migration.js';
import { INBOX_MIGRATIONS } from '../../../messaging/inbox/migrations/postgres/index.js';
import { OUTBOX_MIGRATIONS } from '../../../messaging/outbox/migrations/postgres/index.js';
import { PHASES_MIGRATIONS } from '../../../phases/migrations/postgres/index.js';
import { SESSIONS_MIGRATIONS } from '../../../sessions/migrations/postgres/index.js';
import { IDEMPOTENCY_MIGRATIONS } from './idempotency.js';

/**
 * Every module's migrations in one list ordered by number.
 *
 * @throws Error (when this module loads) unless the numbers run 1, 2, 3 … without a gap or a number taken
 *   twice, and each name starts with its number in four digits
 */
export function sequence(...lists: (readonly Migration[])[]): readonly Migration[] {
  const all = lists.flat().sort((a, b) => a.version - b.version);
  all.forEach((migration, at) => {
    if (migration.version !== at + 1 || !migration.name.startsWith(`${String(migration.version).padStart(4, '0')}_`)) {
      throw new Error(
        `retrysafe: PostgreSQL migration ${migration.name} (version ${migration.version}) is out of sequence: expected version ${at + 1}, named after it`,
      );
    }
  });
  return Object.freeze(all.map((migration) => Object.freeze({ ...migration })));
}

/** Every migration, in the order `migrate()` applies them. */
export const MIGRATIONS: readonly Migration[] = sequence(
  IDEMPOTENCY_MIGRATIONS,
  INBOX_MIGRATIONS,
  OUTBOX_MIGRATIONS,
  PHASES_MIGRATIONS,
  SESSIONS_MIGRATIONS,
);
