/**
 * The store as seen from inside the transaction of a locked claim (`locked-claim.ts`): the claim has no
 * record yet, so its first write inserts it, completed or at a recovery point, in the business
 * transaction; every later write, and any write for another claim, goes to the fenced statements.
 *
 * @module
 */
import type pg from 'pg';
import type { Claim, StoredResponse } from '../../core/record.js';
import type { ClaimInput, TransactionView } from '../../core/store.js';
import { encodeToken } from './codec.js';
import type { LockedClaimStatements } from './locked-claim.js';
import { run } from './statement.js';

/** The record the locked claim will insert: when it was claimed, by the server's clock (ms), and its fence. */
interface LockedClaimRecord {
  readonly createdAt: number;
  readonly fence: string;
}

/** {@link TransactionView} of a locked claim; `recorded` once its record is inserted. */
export class LockedView implements TransactionView {
  private recorded = false;

  constructor(
    private readonly fenced: TransactionView,
    private readonly client: pg.PoolClient,
    private readonly sql: LockedClaimStatements,
    private readonly held: Claim,
    private readonly input: ClaimInput,
    private readonly record: LockedClaimRecord,
    private readonly now: number | null,
  ) {}

  /** Inserts the record completed (the claim's first write); `false` when a record of the key already exists. */
  async complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    if (!this.owns(claim)) return this.fenced.complete(claim, response, retentionMs);
    const result = await run(this.client, this.sql.insertCompleted, [
      claim.scope,
      claim.key,
      encodeToken(claim.fingerprint),
      encodeToken(claim.leaseToken),
      claim.leaseExpiresAt,
      this.record.createdAt,
      this.now,
      retentionMs,
      response.status,
      JSON.stringify(response.headers),
      Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength),
    ]);
    this.recorded = result.rowCount === 1;
    return this.recorded;
  }

  /** Nothing to delete before the first write: the rollback (or a commit without a record) frees the key. */
  release(claim: Claim): Promise<boolean> {
    return this.owns(claim) ? Promise.resolve(true) : this.fenced.release(claim);
  }

  /** Inserts the record in progress at `recoveryPoint` (the claim's first write), under a lease of `leaseMs`. */
  async checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    if (!this.owns(claim)) return this.fenced.checkpoint(claim, recoveryPoint, leaseMs);
    const result = await run<{ leaseExpiresAt: string }>(this.client, this.sql.insertCheckpoint, [
      claim.scope,
      claim.key,
      encodeToken(claim.fingerprint),
      encodeToken(claim.leaseToken),
      recoveryPoint,
      this.now,
      leaseMs,
      this.record.createdAt,
      this.input.retentionMs,
      this.record.fence,
    ]);
    const row = result.rows[0];
    if (row === undefined) return undefined;
    this.recorded = true;
    return { ...claim, leaseExpiresAt: Number(row.leaseExpiresAt), recoveryPoint };
  }

  private owns(claim: Claim): boolean {
    return !this.recorded && claim.leaseToken === this.held.leaseToken && claim.scope === this.held.scope && claim.key === this.held.key;
  }
}
