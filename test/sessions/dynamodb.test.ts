/**
 * The DynamoDB session store on DynamoDB Local: the shared sessions contract, two processes (two clients,
 * two stores) racing on one session, the item layout, and the option checks.
 */
import { CreateTableCommand, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createDynamodbSessionStore } from '../../src/dynamodb.js';
import { createSessionReceiver, type SessionStore } from '../../src/sessions/index.js';
import { createDynamodbTable, dynamodbTableDefinition } from '../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile } from '../support/dynamodb.js';
import { uniqueName } from '../support/services.js';
import { sessionSuite } from './contract.js';

const TABLE = uniqueName('rs_sessions');
const HASHED = `${TABLE}_h`;
const local = await dynamodbLocalForFile();

if (local !== undefined) {
  beforeAll(async () => {
    // TTL off: the contract's clock starts near the epoch, so DynamoDB Local would delete its items.
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: TABLE })));
  });
  afterAll(() => local.stop());

  let stores = 0;
  sessionSuite('the DynamoDB store', () => createDynamodbSessionStore({ client: local.client, table: TABLE, prefix: `s${++stores}` }));

  describe('DynamoDB session store', () => {
    it('applies one request number once when two processes race on it, and shares one session state', async () => {
      const other = local.newClient();
      const clock = new ManualClock(1_700_000_000_000);
      const stores: SessionStore[] = [
        createDynamodbSessionStore({ client: local.client, table: TABLE, prefix: 'race' }),
        createDynamodbSessionStore({ client: other, table: TABLE, prefix: 'race' }),
      ];
      const [a, b] = stores.map((store) => createSessionReceiver({ store, clock })) as [ReturnType<typeof createSessionReceiver>, ReturnType<typeof createSessionReceiver>];
      const clientId = await a.register();
      let executions = 0;
      let open = (): void => undefined;
      const held = new Promise<void>((resolve) => (open = resolve));
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      // The work is held open until the other 19 have been answered, so each of them met it in flight.
      let settled = 0;
      const racing = Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          (i % 2 === 0 ? a : b)
            .apply(request, async () => {
              executions++;
              await held;
              return `from ${i % 2 === 0 ? 'a' : 'b'}`;
            })
            .finally(() => {
              if (++settled === 19) open();
            }),
        ),
      );
      const outcomes = await racing;
      expect(executions).toBe(1);
      const winners = outcomes.filter((o) => o.status === 'fulfilled');
      expect(winners).toHaveLength(1);
      const value = winners[0]?.status === 'fulfilled' ? winners[0].value.value : undefined;
      expect(await b.apply(request, () => Promise.resolve('late'))).toEqual({ value, replayed: true, saved: true });
      expect(executions).toBe(1);
      await b.keepAlive(clientId, 1);
      expect(await a.stats(clientId)).toMatchObject({ storedResponses: 0, inProgress: 0, lowWaterMark: 1 });
    });

    it('applies each of 40 requests once when every one is sent to two processes at once', async () => {
      const other = local.newClient();
      const clock = new ManualClock(1_700_000_000_000);
      const receivers = [local.client, other].map((client) => createSessionReceiver({ store: createDynamodbSessionStore({ client, table: TABLE, prefix: 'pairs' }), clock }));
      const clientId = await receivers[0]!.register();
      const effects = new Map<number, number>();
      for (let n = 1; n <= 40; n++) {
        const pair = await Promise.allSettled(
          receivers.map((receiver) =>
            receiver.apply({ clientId, requestNumber: n, lowWaterMark: n - 1 }, () => {
              effects.set(n, (effects.get(n) ?? 0) + 1);
              return Promise.resolve(n);
            }),
          ),
        );
        expect(pair.some((o) => o.status === 'fulfilled')).toBe(true);
      }
      expect(effects.size).toBe(40);
      expect([...effects.values()].every((count) => count === 1)).toBe(true);
      expect(await receivers[1]!.stats(clientId)).toMatchObject({ lowWaterMark: 39, inProgress: 0, storedResponses: 1 });
    });

    it('keeps a session in one item under its prefix, with a TTL past its lease, on a table with a partition key only', async () => {
      await createDynamodbTable(local.client, { table: HASHED, keySchema: { partitionKey: 'id', sortKey: undefined } });
      const store = createDynamodbSessionStore({ client: local.client, table: HASHED, keySchema: { partitionKey: 'id', sortKey: undefined }, prefix: 'p', ttlGraceSeconds: 60 });
      const now = Date.now();
      const receiver = createSessionReceiver({ store, clock: new ManualClock(now), leaseMs: 30_000 });
      const clientId = await receiver.register();
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve('x'));
      const { Item } = await local.client.send(new GetItemCommand({ TableName: HASHED, Key: { id: { S: `session#p#${clientId}` } }, ConsistentRead: true }));
      expect(Item?.clientId?.S).toBe(clientId);
      expect(Item?.requests?.M?.['1']?.M?.response?.S).toBe('"x"');
      expect(Number(Item?.ttl?.N)).toBe(Math.ceil((now + 30_000) / 1000) + 60);
      expect(await store.stats(clientId)).toMatchObject({ storedResponses: 1, inProgress: 0 });
    });

    it.each<[string, unknown]>([
      ['client', { client: {}, table: TABLE }],
      ['table', { client: local.client, table: '' }],
      ['prefix', { client: local.client, table: TABLE, prefix: 'a#b' }],
      ['prefix', { client: local.client, table: TABLE, prefix: '' }],
      ['keySchema', { client: local.client, table: TABLE, keySchema: { partitionKey: 'pk', sortKey: 'pk' } }],
      ['ttlGraceSeconds', { client: local.client, table: TABLE, ttlGraceSeconds: -1 }],
    ])('throws a TypeError naming %s', (name, options) => {
      const make = (): SessionStore => createDynamodbSessionStore(options as Parameters<typeof createDynamodbSessionStore>[0]);
      expect(make).toThrow(TypeError);
      expect(make).toThrow(`"${name}"`);
    });
  });
}
