/**
 * The inbox on DynamoDB Local: the shared contract, the handler's writes committed with the processed mark
 * in one `TransactWriteItems` (a failing business condition leaves neither), and the option checks.
 */
import { randomUUID } from 'node:crypto';
import { CreateTableCommand, GetItemCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createDynamodbInboxStore, type DynamodbTransaction } from '../../../src/dynamodb.js';
import { createInbox } from '../../../src/messaging/inbox/index.js';
import { dynamodbTableDefinition } from '../../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile, type DynamodbLocal } from '../../support/dynamodb.js';
import { uniqueName } from '../../support/services.js';
import { inboxContract } from './contract.js';

const TABLE = uniqueName('rs_inbox');
const EFFECTS = `${TABLE}_effects`;
const local = await dynamodbLocalForFile();

/** One business item per write, keyed by a fresh id: a second run of a handler leaves a second item. */
function write(tx: DynamodbTransaction, consumer: string, messageId: string): Promise<void> {
  tx.put({ TableName: EFFECTS, Item: { id: { S: randomUUID() }, consumer: { S: consumer }, messageId: { S: messageId } } });
  return Promise.resolve();
}

async function count(on: DynamodbLocal, consumer: string, messageId: string): Promise<number> {
  const { Count } = await on.client.send(
    new ScanCommand({
      TableName: EFFECTS,
      ConsistentRead: true,
      FilterExpression: 'consumer = :c AND messageId = :m',
      ExpressionAttributeValues: { ':c': { S: consumer }, ':m': { S: messageId } },
    }),
  );
  return Count ?? 0;
}

if (local !== undefined) {
  beforeAll(async () => {
    // TTL off, as the store sets none; the clock of the contract is far from the real one anyway.
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: TABLE })));
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: EFFECTS, keySchema: { partitionKey: 'id', sortKey: undefined } })));
  });
  afterAll(() => local.stop());

  let stores = 0;
  inboxContract('dynamodb', () =>
    Promise.resolve({
      store: createDynamodbInboxStore({ client: local.client, table: TABLE, prefix: `c${++stores}` }),
      write,
      count: (consumer: string, messageId: string) => count(local, consumer, messageId),
    }),
  );

  describe('DynamoDB inbox store', () => {
    it('commits the handler’s writes and the mark in one transaction: a failing business condition leaves neither', async () => {
      const store = createDynamodbInboxStore({ client: local.client, table: TABLE, prefix: 'tx', keySchema: { partitionKey: 'pk', sortKey: 'sk' } });
      const inbox = createInbox({ store, clock: new ManualClock(1_700_000_000_000), maxAttempts: 3 });
      const id = randomUUID();
      const taken = randomUUID();
      await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: `${TABLE}_orders`, keySchema: { partitionKey: 'id', sortKey: undefined } })));
      const order = (tx: DynamodbTransaction, orderId: string): Promise<void> => {
        tx.put({ TableName: `${TABLE}_orders`, Item: { id: { S: orderId } }, ConditionExpression: 'attribute_not_exists(id)' });
        return write(tx, 'orders', id);
      };
      expect(await inbox.handle({ consumer: 'orders', messageId: taken }, (tx) => order(tx, 'o-1'))).toEqual({ status: 'processed', attempts: 1 });
      // Order o-1 exists: the second message's transaction is cancelled, its effect and mark with it.
      const refused = await inbox.handle({ consumer: 'orders', messageId: id }, (tx) => order(tx, 'o-1'));
      expect(refused).toMatchObject({ status: 'retry', attempts: 1 });
      expect(await count(local, 'orders', id)).toBe(1);
      const item = await local.client.send(new GetItemCommand({ TableName: TABLE, Key: { pk: { S: 'inbox#tx#orders' }, sk: { S: `m#${id}` } }, ConsistentRead: true }));
      expect(item.Item?.processedAt).toBeUndefined();
      expect(item.Item?.holder).toBeUndefined();
      expect(await inbox.handle({ consumer: 'orders', messageId: id }, (tx) => order(tx, 'o-2'))).toEqual({ status: 'processed', attempts: 2 });
      expect(await count(local, 'orders', id)).toBe(2);
    });

    it.each<[string, unknown]>([
      ['client', { client: {}, table: TABLE }],
      ['table', { client: local.client, table: '' }],
      ['prefix', { client: local.client, table: TABLE, prefix: 'a#b' }],
      ['keySchema.partitionKey', { client: local.client, table: TABLE, keySchema: { partitionKey: '', sortKey: 'sk' } }],
    ])('throws a TypeError naming %s', (name, options) => {
      const make = (): unknown => createDynamodbInboxStore(options as Parameters<typeof createDynamodbInboxStore>[0]);
      expect(make).toThrow(TypeError);
      expect(make).toThrow(`"${name}"`);
    });
  });
}
