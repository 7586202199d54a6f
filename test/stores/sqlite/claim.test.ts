import BetterSqlite3 from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/core/clock.js';
import type { IdempotencyRecord } from '../../../src/core/record.js';
import type { ClaimInput, ClaimResult } from '../../../src/core/store.js';
import { prepareClaim } from '../../../src/stores/sqlite/claim.js';
import { recordsSchema } from '../../../src/stores/sqlite/migrations.js';
import { migrateSqlite } from '../../../src/stores/sqlite/open.js';
import { prepareStatements } from '../../../src/stores/sqlite/statements.js';

const NOW = 1_700_000_000_000;
const input = (fingerprint: string, leaseToken?: string): ClaimInput => ({
  scope: 's',
  key: 'k',
  fingerprint,
  leaseMs: 60_000,
  retentionMs: 600_000,
  ...(leaseToken !== undefined && { leaseToken }),
});

/**
 * The claim reads first and then writes in autocommit mode. Between the two, another process may write the
 * record: the read below is made to miss a record that is there, as it would if that process inserted it
 * right after the read.
 */
describe('sqlite claim: a record written between the read and the upsert', () => {
  function setup(): { claim: (input: ClaimInput, now: number, leaseToken: string) => ClaimResult; reads: number[] } {
    const database = new BetterSqlite3(':memory:');
    migrateSqlite(database, recordsSchema('records'), systemClock);
    const sql = prepareStatements(database, 'records');
    const reads: number[] = [];
    // Every read of the claim starts with the replay read (a record with no replay text is then read whole).
    const racedReplay = (scope: string, key: string): IdempotencyRecord | null | undefined => {
      reads.push(reads.length);
      return reads.length === 1 ? undefined : sql.replay(scope, key);
    };
    const steps = prepareClaim(database, 'records', { get: sql.get, replay: racedReplay });
    const claim = (input: ClaimInput, now: number, leaseToken: string): ClaimResult => {
      const read = steps.read(input, now, leaseToken);
      return read.answer ?? steps.write(input, now, leaseToken, read.found);
    };
    return { claim, reads };
  }

  it('answers from the record that won, read in the claim’s own transaction', () => {
    const { claim, reads } = setup();
    const first = claim(input('a'), NOW, 'token-1');
    expect(first.acquired).toBe(true);
    reads.length = 0;
    const second = claim(input('b'), NOW + 1, 'token-2');
    expect(second).toMatchObject({ acquired: false, record: { fingerprint: 'a', leaseToken: 'token-1', state: 'in_progress' } });
    expect(reads).toHaveLength(2);
  });

  it('hands its lease back to the owner who claims again', () => {
    const { claim, reads } = setup();
    expect(claim(input('a'), NOW, 'token-1').acquired).toBe(true);
    reads.length = 0;
    expect(claim(input('a', 'token-1'), NOW + 5, 'token-1')).toMatchObject({
      acquired: true,
      claim: { leaseToken: 'token-1', leaseExpiresAt: NOW + 60_000, takeover: false },
    });
  });
});

/** The claim reports `takeover` from the branch it ran (C2 or C4 of the claim decision table), not from the times it returns. */
describe('sqlite claim: the takeover flag', () => {
  function setup(): { claim: (input: ClaimInput, now: number, leaseToken: string) => ClaimResult; locked: (input: ClaimInput, now: number, leaseToken: string) => ClaimResult } {
    const database = new BetterSqlite3(':memory:');
    migrateSqlite(database, recordsSchema('records'), systemClock);
    const steps = prepareClaim(database, 'records', prepareStatements(database, 'records'));
    return {
      claim: (input, now, leaseToken) => {
        const read = steps.read(input, now, leaseToken);
        return read.answer ?? steps.write(input, now, leaseToken, read.found);
      },
      locked: (input, now, leaseToken) => steps.locked(input, now, leaseToken, undefined),
    };
  }
  const zeroLease = (fingerprint: string): ClaimInput => ({ ...input(fingerprint), leaseMs: 0 });

  it.each(['claim', 'locked'] as const)('is set for a takeover in the same millisecond as the record was created (%s)', (step) => {
    const steps = setup();
    expect(steps[step](zeroLease('a'), NOW, 'token-1')).toMatchObject({ acquired: true, claim: { takeover: false } });
    expect(steps[step](input('a'), NOW, 'token-2')).toMatchObject({ acquired: true, claim: { leaseToken: 'token-2', takeover: true } });
    expect(steps[step](input('a'), NOW, 'token-3')).toMatchObject({ acquired: false, record: { leaseToken: 'token-2' } });
  });

  it.each(['claim', 'locked'] as const)('is not set when the retention ended, whatever the fingerprint (%s)', (step) => {
    const steps = setup();
    expect(steps[step](input('a'), NOW, 'token-1').acquired).toBe(true);
    const later = NOW + 600_000;
    expect(steps[step](input('b'), later, 'token-2')).toMatchObject({
      acquired: true,
      claim: { fingerprint: 'b', leaseToken: 'token-2', leaseExpiresAt: later + 60_000, takeover: false },
    });
  });
});
