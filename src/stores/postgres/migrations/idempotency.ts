/**
 * The idempotency store's PostgreSQL migrations: the records table, its `claim()` function, the
 * recovery points atomic phases save through the store's fenced `checkpoint` (recovery points are part of
 * the store contract, so the store owns their column and index), the claims' fencing tokens, the side
 * store of large response bodies (`response-bodies.ts`) and the claim's first step as a function. Their
 * numbers belong to the one sequence of every module (`src/migrate.ts`).
 *
 * @module
 */
import type { Migration } from '../migration.js';
import { sql as init } from './0001_init.js';
import { sql as recoveryPoints } from './0004_recovery_points.js';
import { sql as waiters } from './0006_waiters.js';
import { sql as dropClaimGuard } from './0008_drop_claim_guard.js';
import { sql as claimOwner } from './0009_claim_owner.js';
import { sql as fencingToken } from './0013_fencing_token.js';
import { sql as responseBodies } from './0014_response_bodies.js';
import { sql as readOrInsert } from './0015_read_or_insert.js';

/**
 * The records table, its retention index, the claim function, the recovery points, the claim's later
 * changes, the fencing token, the side store of large response bodies and `read_or_insert()`, in order.
 */
export const IDEMPOTENCY_MIGRATIONS: readonly Migration[] = [
  { version: 1, name: '0001_init', sql: init },
  { version: 4, name: '0004_recovery_points', sql: recoveryPoints },
  { version: 6, name: '0006_waiters', sql: waiters },
  { version: 8, name: '0008_drop_claim_guard', sql: dropClaimGuard },
  { version: 9, name: '0009_claim_owner', sql: claimOwner },
  { version: 13, name: '0013_fencing_token', sql: fencingToken },
  { version: 14, name: '0014_response_bodies', sql: responseBodies },
  { version: 15, name: '0015_read_or_insert', sql: readOrInsert },
];
