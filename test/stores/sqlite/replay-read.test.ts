import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { IdempotencyRecord, StoredResponse } from '../../../src/core/record.js';
import type { ClaimInput } from '../../../src/core/store.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';

const NOW = 1_700_000_000_000;
const RETENTION_MS = 600_000;

const input = (key: string, fingerprint: string, leaseToken: string): ClaimInput => ({
  scope: 'scope "q" \\ é',
  key,
  fingerprint,
  leaseMs: 60_000,
  retentionMs: RETENTION_MS,
  leaseToken,
});

/** Every byte value, NUL and invalid UTF-8 included. */
const BINARY = Uint8Array.from({ length: 256 }, (_, i) => i);

/**
 * A completed record is read back from its replay text (schema step 4) on a claim, and from the same text
 * by `get` and `listRecords`: each must give the record its columns describe, whatever its strings hold.
 */
describe('sqlite store: the replay text of a completed record', () => {
  let clock: ManualClock;
  let store: SqliteStore;
  beforeEach(() => {
    clock = new ManualClock(NOW);
    store = createSqliteStore({ clock });
  });
  afterEach(async () => {
    await store.close();
  });

  /** Claims `key`, checkpoints it (when `recoveryPoint` is given), completes it with `response` 10 ms later; returns the claim's input. */
  async function complete(key: string, fingerprint: string, leaseToken: string, response: StoredResponse, recoveryPoint?: string): Promise<ClaimInput> {
    const claimed = await store.claim(input(key, fingerprint, leaseToken));
    if (!claimed.acquired) throw new Error('not claimed');
    clock.advance(5);
    if (recoveryPoint !== undefined) await store.checkpoint(claimed.claim, recoveryPoint, 90_000);
    clock.advance(5);
    expect(await store.complete(claimed.claim, response, RETENTION_MS)).toBe(true);
    return input(key, fingerprint, leaseToken);
  }

  /** What a claim of `claimInput` a second later is refused with, checked to be what `get` and `listRecords` read. */
  async function replayed(claimInput: ClaimInput): Promise<IdempotencyRecord> {
    clock.advance(1_000);
    const result = await store.claim({ ...claimInput, leaseToken: 'another' });
    if (result.acquired) throw new Error('a completed record was claimed');
    expect(await store.get(claimInput.scope, claimInput.key)).toEqual(result.record);
    expect(await store.listRecords({ scope: claimInput.scope, keyPrefix: claimInput.key, limit: 1 })).toEqual([result.record]);
    return result.record;
  }

  it('gives every field of a record whose strings hold quotes, backslashes and non-ASCII text', async () => {
    const response = { status: 201, headers: { 'content-type': 'application/json', 'x-note': 'a "quoted" \\ value, é' }, body: BINARY };
    const claimInput = await complete('k-escaped', 'fp "1" \\ é', 'token \\ "t" 😀', response, '{"phase":"b\\"","n":1}');
    const record = await replayed(claimInput);
    expect(record).toEqual({
      scope: claimInput.scope,
      key: 'k-escaped',
      fingerprint: 'fp "1" \\ é',
      state: 'completed',
      leaseToken: 'token \\ "t" 😀',
      leaseExpiresAt: NOW + 5 + 90_000,
      recoveryPoint: '{"phase":"b\\"","n":1}',
      createdAt: NOW,
      completedAt: NOW + 10,
      expiresAt: NOW + 10 + RETENTION_MS,
      response: { status: 201, headers: response.headers, body: BINARY },
    });
  });

  it('gives every field of a plain record, without a recovery point', async () => {
    const body = new TextEncoder().encode('{"ok":true}');
    const claimInput = await complete('k-plain', 'f'.repeat(64), 'token-1', { status: 200, headers: {}, body });
    expect(await replayed(claimInput)).toEqual({
      scope: claimInput.scope,
      key: 'k-plain',
      fingerprint: 'f'.repeat(64),
      state: 'completed',
      leaseToken: 'token-1',
      leaseExpiresAt: NOW + 60_000,
      createdAt: NOW,
      completedAt: NOW + 10,
      expiresAt: NOW + 10 + RETENTION_MS,
      response: { status: 200, headers: {}, body },
    });
  });

  it('keeps an empty recovery point apart from none, and an empty body', async () => {
    const claimInput = await complete('k-empty', 'fp', 'token-2', { status: 204, headers: { a: '' }, body: new Uint8Array() }, '');
    expect(await replayed(claimInput)).toMatchObject({ recoveryPoint: '', response: { status: 204, headers: { a: '' }, body: new Uint8Array() } });
  });

  it('replays a record completed before the replay text existed from its columns', async () => {
    const claimInput = await complete('k-old', 'fp', 'token-3', { status: 201, headers: { a: 'b' }, body: BINARY });
    // As schema step 3 wrote a completion: status, headers and completion time in their columns, no replay text.
    store.database
      .prepare(`UPDATE retrysafe_records SET replay = NULL, response_status = 202, response_headers = '{"c":"d"}', completed_at = ? WHERE idempotency_key = 'k-old'`)
      .run(NOW + 7);
    expect(await replayed(claimInput)).toMatchObject({
      state: 'completed',
      fingerprint: 'fp',
      completedAt: NOW + 7,
      response: { status: 202, headers: { c: 'd' }, body: BINARY },
    });
  });

  it('is dropped when a claim replaces the record after its retention', async () => {
    const claimInput = await complete('k-expired', 'fp', 'token-4', { status: 201, headers: {}, body: BINARY });
    clock.advance(RETENTION_MS);
    const again = await store.claim({ ...claimInput, fingerprint: 'other', leaseToken: 'token-5' });
    expect(again).toMatchObject({ acquired: true, claim: { leaseToken: 'token-5', takeover: false } });
    expect(await store.get(claimInput.scope, 'k-expired')).toMatchObject({ state: 'in_progress', fingerprint: 'other', leaseToken: 'token-5' });
    expect(store.database.prepare(`SELECT replay FROM retrysafe_records WHERE idempotency_key = 'k-expired'`).pluck().get()).toBeNull();
    expect((await store.get(claimInput.scope, 'k-expired'))?.response).toBeUndefined();
  });
});
