/**
 * The ordered list of PostgreSQL migrations. Append-only: a new migration is a new numbered file and a
 * new last entry; released entries never change, because the ledger records them as applied.
 *
 * @module
 */
import { sql as init } from './0001_init.js';
import { sql as inbox } from './0002_inbox.js';
import { sql as outbox } from './0003_outbox.js';
import { sql as recoveryPoints } from './0004_recovery_points.js';
import { sql as sessions } from './0005_sessions.js';
import { sql as waiters } from './0006_waiters.js';
import { sql as outboxWaiting } from './0007_outbox_waiting.js';
import { sql as dropClaimGuard } from './0008_drop_claim_guard.js';
import { sql as claimOwner } from './0009_claim_owner.js';

/** One numbered migration. */
export interface Migration {
  /** Position in the sequence, from 1; the ledger's primary key. */
  readonly version: number;
  /** The file's name without extension, e.g. `0001_init`; recorded in the ledger for people reading it. */
  readonly name: string;
  /** The SQL for a schema, given as an already quoted identifier. May hold several statements. */
  readonly sql: (quotedSchema: string) => string;
}

/** Every migration, in order. */
export const MIGRATIONS: readonly Migration[] = Object.freeze([
  { version: 1, name: '0001_init', sql: init },
  { version: 2, name: '0002_inbox', sql: inbox },
  { version: 3, name: '0003_outbox', sql: outbox },
  { version: 4, name: '0004_recovery_points', sql: recoveryPoints },
  { version: 5, name: '0005_sessions', sql: sessions },
  { version: 6, name: '0006_waiters', sql: waiters },
  { version: 7, name: '0007_outbox_waiting', sql: outboxWaiting },
  { version: 8, name: '0008_drop_claim_guard', sql: dropClaimGuard },
  { version: 9, name: '0009_claim_owner', sql: claimOwner },
]);
