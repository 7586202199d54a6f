/**
 * The DynamoDB store on DynamoDB Local: the shared store contract on both key layouts, the fallback read
 * for endpoints that do not return the old item of a failed condition, the TTL attribute, the 400 KB item
 * limit, and the renewal and idempotent completion of the store contract.
 */
import { ConditionalCheckFailedException, DescribeTableCommand, GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../../../src/core/record.js';
import type { ClaimInput, ClaimResult } from '../../../src/core/store.js';
import { createDynamodbStore, createDynamodbTable, dynamodbTableDefinition } from '../../../src/stores/dynamodb/index.js';
import { dynamodbContractFixtures, dynamodbLocalForFile } from '../../support/dynamodb.js';
import { uniqueName } from '../../support/services.js';
import { storeContract } from '../contract.js';

const PREFIX = uniqueName('rs_ddb');
const local = await dynamodbLocalForFile();

if (local !== undefined) {
  afterAll(() => local.stop());
  storeContract('dynamodb (pk, sk)', dynamodbContractFixtures(local, `${PREFIX}_c`));
  storeContract('dynamodb (one hashed key)', dynamodbContractFixtures(local, `${PREFIX}_h`, { partitionKey: 'id', sortKey: undefined }));
}

const FP = 'f'.repeat(64);
const encoder = new TextEncoder();

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'shared', key, fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000, ...overrides };
}

function text(body: string, status = 200): StoredResponse {
  return { status, headers: { 'content-type': 'text/plain' }, body: encoder.encode(body) };
}

function won(result: ClaimResult): Claim {
  if (!result.acquired) throw new Error(`expected a won claim, got ${JSON.stringify(result.record)}`);
  return result.claim;
}

/**
 * A client whose failed conditions come back without the old item, as from an endpoint that does not
 * support `ReturnValuesOnConditionCheckFailure` (dynalite, older emulators); counts the requests sent.
 */
function withoutOldItems(client: DynamoDBClient): { client: DynamoDBClient; sent: string[] } {
  const sent: string[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      sent.push(String(context.commandName));
      try {
        return await next(args);
      } catch (error) {
        if (error instanceof ConditionalCheckFailedException) delete error.Item;
        throw error;
      }
    },
    { step: 'initialize', name: 'dropOldItem' },
  );
  return { client, sent };
}

/** Counts the requests `client` sends, by command name. */
function counted(client: DynamoDBClient): string[] {
  const sent: string[] = [];
  client.middlewareStack.add(
    (next, context) => (args) => {
      sent.push(String(context.commandName));
      return next(args);
    },
    { step: 'initialize', name: 'countRequests' },
  );
  return sent;
}

if (local !== undefined) {
  let tables = 0;
  async function fresh(options: { client?: DynamoDBClient; clock?: ManualClock } = {}) {
    const table = `${PREFIX}_s${++tables}`;
    await createDynamodbTable(local!.client, { table });
    const clock = options.clock ?? new ManualClock(Date.now());
    const client = options.client ?? local!.newClient();
    return { table, clock, client, store: createDynamodbStore({ client, table, clock }) };
  }

  storeContract('dynamodb without the old item of a failed condition', async () => {
    const { store, clock } = await fresh({ client: withoutOldItems(local.newClient()).client });
    return { store, clock, close: () => store.close() };
  });

  describe('dynamodb store', () => {
    it('costs one request per new key, per completion and per replay; a takeover costs two', async () => {
      const client = local.newClient();
      const sent = counted(client);
      const { store, clock } = await fresh({ client });
      const claim = won(await store.claim(input('k')));
      expect(sent).toEqual(['UpdateItemCommand']);
      expect(await store.complete(claim, text('done'), 60_000)).toBe(true);
      expect(sent).toHaveLength(2);
      const replay = await store.claim(input('k'));
      expect(replay.acquired).toBe(false);
      expect(sent).toHaveLength(3);
      won(await store.claim(input('crashed')));
      clock.advance(10_000);
      sent.length = 0;
      expect(won(await store.claim(input('crashed'))).takeover).toBe(true);
      expect(sent).toEqual(['UpdateItemCommand', 'UpdateItemCommand']);
    });

    it('reads the record once when the endpoint does not return the old item, and still decides right', async () => {
      const { client, sent } = withoutOldItems(local.newClient());
      const { store } = await fresh({ client });
      const claim = won(await store.claim(input('k')));
      expect(await store.complete(claim, text('done'), 60_000)).toBe(true);
      sent.length = 0;
      const replay = await store.claim(input('k'));
      expect(replay.acquired).toBe(false);
      expect(sent).toEqual(['UpdateItemCommand', 'GetItemCommand']);
      // The idempotent completion is recognised from the read as well.
      expect(await store.complete(claim, text('again'), 60_000)).toBe(true);
      expect(new TextDecoder().decode((await store.get('shared', 'k'))?.response?.body)).toBe('done');
    });

    it('bumps the fence counter with every claim, and sets the TTL attribute past the last deadline', async () => {
      const { store, clock, table, client } = await fresh();
      const start = clock.now();
      const first = won(await store.claim(input('k', { leaseMs: 100_000, retentionMs: 1_000 })));
      const raw = async () => (await client.send(new GetItemCommand({ TableName: table, Key: { pk: { S: 's#shared' }, sk: { S: 'k#k' } }, ConsistentRead: true }))).Item;
      expect((await raw())?.['fence']).toEqual({ N: '1' });
      // The lease outlives the retention: the TTL covers the lease, plus the 300 s grace.
      expect((await raw())?.['ttl']).toEqual({ N: String(Math.ceil((start + 100_000) / 1000) + 300) });
      clock.advance(100_000);
      const second = won(await store.claim(input('k', { leaseMs: 1_000, retentionMs: 50_000 })));
      expect(second.takeover).toBe(false);
      expect((await raw())?.['fence']).toEqual({ N: '2' });
      expect(await store.complete(first, text('late'), 60_000)).toBe(false);
      expect(await store.complete(second, text('ok'), 3_600_000)).toBe(true);
      expect((await raw())?.['ttl']).toEqual({ N: String(Math.ceil((clock.now() + 3_600_000) / 1000) + 300) });
    });

    it('saves a response over the 400 KB item limit without its body, marked for the 410 replay', async () => {
      const { store } = await fresh();
      const claim = won(await store.claim(input('big')));
      const body = new Uint8Array(420 * 1024).fill(7);
      expect(await store.complete(claim, { status: 201, headers: { location: '/x/1' }, body }, 60_000)).toBe(true);
      const record = await store.get('shared', 'big');
      expect(record?.response?.status).toBe(201);
      expect(record?.response?.body.byteLength).toBe(0);
      expect(record?.response?.headers).toEqual({ location: '/x/1', [RESPONSE_NOT_KEPT_HEADER]: String(420 * 1024) });
      // Just under the limit is kept whole.
      const near = won(await store.claim(input('near')));
      const kept = new Uint8Array(390 * 1024).fill(9);
      expect(await store.complete(near, { status: 200, headers: {}, body: kept }, 60_000)).toBe(true);
      expect((await store.get('shared', 'near'))?.response?.body.byteLength).toBe(kept.byteLength);
    });

    it('renews a lease under its token, stretching the retention, and refuses once fenced off', async () => {
      const { store, clock } = await fresh();
      const claim = won(await store.claim(input('k', { leaseMs: 1_000, retentionMs: 5_000 })));
      clock.advance(500);
      const renewed = await store.renew(claim, 8_000);
      expect(renewed).toEqual({ ...claim, leaseExpiresAt: clock.now() + 8_000 });
      expect(await store.get('shared', 'k')).toMatchObject({ leaseExpiresAt: clock.now() + 8_000, expiresAt: clock.now() + 8_000, leaseToken: claim.leaseToken });
      clock.advance(7_999);
      expect((await store.claim(input('k'))).acquired).toBe(false);
      clock.advance(1);
      const taker = won(await store.claim(input('k')));
      expect(await store.renew(claim, 8_000)).toBeUndefined();
      expect(await store.renew(taker, 1_000)).toMatchObject({ leaseToken: taker.leaseToken });
      await expect(store.renew(taker, -1)).rejects.toThrow(TypeError);
      expect(await store.complete(taker, text('ok'), 60_000)).toBe(true);
      expect(await store.renew(taker, 1_000)).toBeUndefined();
    });

    it('answers a completion retried by its own token true without changing the record', async () => {
      const { store, clock } = await fresh();
      const claim = won(await store.claim(input('k')));
      expect(await store.complete(claim, text('first'), 60_000)).toBe(true);
      const stored = await store.get('shared', 'k');
      clock.advance(10);
      expect(await store.complete(claim, text('second'), 90_000)).toBe(true);
      expect(await store.get('shared', 'k')).toEqual(stored);
      expect(await store.complete({ ...claim, leaseToken: 'another' }, text('third'), 60_000)).toBe(false);
    });

    it('gives one winner to 20 claims of one key from two clients', async () => {
      const { store, table, clock } = await fresh();
      const other = createDynamodbStore({ client: local.newClient(), table, clock });
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).claim(input('hot'))));
      expect(results.filter((result) => result.acquired)).toHaveLength(1);
      clock.advance(10_000);
      const takeovers = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).claim(input('hot'))));
      expect(takeovers.filter((result) => result.acquired)).toHaveLength(1);
    });

    it('lists records in (scope, key) order by pages, counts expired leases and pings', async () => {
      const { store, clock } = await fresh();
      for (const [scope, key] of [['b', '2'], ['a', '2'], ['a', '1'], ['b', '1'], ['a', 'x1']] as const) won(await store.claim(input(key, { scope, leaseMs: 1_000 })));
      const page = await store.listRecords({ limit: 2 });
      expect(page.map((r) => `${r.scope}/${r.key}`)).toEqual(['a/1', 'a/2']);
      const next = await store.listRecords({ limit: 10, after: { scope: 'a', key: '2' } });
      expect(next.map((r) => `${r.scope}/${r.key}`)).toEqual(['a/x1', 'b/1', 'b/2']);
      expect((await store.listRecords({ limit: 10, scope: 'a', keyPrefix: 'x' })).map((r) => r.key)).toEqual(['x1']);
      expect(await store.listRecords({ limit: 10, state: 'completed' })).toEqual([]);
      expect(await store.countExpiredLeases(10)).toBe(0);
      clock.advance(1_000);
      expect(await store.countExpiredLeases(10)).toBe(5);
      expect(await store.countExpiredLeases(3)).toBe(3);
      await expect(store.listRecords({ limit: 0 })).rejects.toThrow(TypeError);
      await expect(store.ping()).resolves.toBeUndefined();
    });

    it('creates its table once: a second run finds it and its TTL in place', async () => {
      const table = `${PREFIX}_migrate`;
      expect(await createDynamodbTable(local.client, { table, keySchema: { partitionKey: 'id', sortKey: undefined }, ttlAttribute: 'expiration' })).toEqual({ created: true, ttlEnabled: true });
      expect(await createDynamodbTable(local.client, { table, keySchema: { partitionKey: 'id', sortKey: undefined }, ttlAttribute: 'expiration' })).toEqual({ created: false, ttlEnabled: false });
      const described = await local.client.send(new DescribeTableCommand({ TableName: table }));
      expect(described.Table?.KeySchema).toEqual([{ AttributeName: 'id', KeyType: 'HASH' }]);
      expect(dynamodbTableDefinition({ table: 't1x' }).KeySchema).toEqual([
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ]);
    });

    it('rejects bad options with a TypeError naming the option', () => {
      const client = local.client;
      expect(() => createDynamodbStore({ client, table: '' })).toThrow(/option "table"/);
      expect(() => createDynamodbStore({ client: {} as DynamoDBClient, table: 'abc' })).toThrow(/option "client"/);
      expect(() => createDynamodbStore({ client, table: 'abc', keySchema: { partitionKey: 'a', sortKey: 'a' } })).toThrow(/keySchema/);
      expect(() => createDynamodbStore({ client, table: 'abc', ttlGraceSeconds: -1 })).toThrow(/ttlGraceSeconds/);
    });
  });
}
