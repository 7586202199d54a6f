/**
 * Transactional mode on DynamoDB Local: the handler's writes (`tx.put`, `tx.update`, `tx.conditionCheck`)
 * and the saved response commit in one `TransactWriteItems`, or none of them does.
 */
import { CreateTableCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { LeaseLostError } from '../../../src/core/errors.js';
import { createReceiver } from '../../../src/receiver.js';
import { createDynamodbStore, createDynamodbTable, type DynamodbTransaction } from '../../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile } from '../../support/dynamodb.js';
import { uniqueName } from '../../support/services.js';

const PREFIX = uniqueName('rs_ddb_tx');
const local = await dynamodbLocalForFile();
const FP = 'f'.repeat(64);

if (local !== undefined) {
  afterAll(() => local.stop());
  let n = 0;

  async function setup() {
    const table = `${PREFIX}_r${++n}`;
    const orders = `${PREFIX}_o${n}`;
    await createDynamodbTable(local!.client, { table });
    await local!.client.send(
      new CreateTableCommand({ TableName: orders, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }] }),
    );
    const clock = new ManualClock(Date.now());
    const store = createDynamodbStore({ client: local!.client, table, clock });
    const receiver = createReceiver({ store, transactional: true, clock });
    const rows = async () => (await local!.client.send(new ScanCommand({ TableName: orders, ConsistentRead: true }))).Items ?? [];
    const order = (tx: DynamodbTransaction, id: string) => tx.put({ TableName: orders, Item: { id: { S: id } }, ConditionExpression: 'attribute_not_exists(id)' });
    return { table, orders, clock, store, receiver, rows, order };
  }

  describe('dynamodb transactional mode', () => {
    it('commits the business writes with the saved response; a retry replays without writing again', async () => {
      const { receiver, rows, order, store } = await setup();
      let runs = 0;
      const id = { scope: 's', key: 'k1', fingerprint: FP };
      const work = () =>
        receiver.run(id, ({ tx }) => {
          runs++;
          order(tx, 'o-1');
          return Promise.resolve({ order: 'o-1' });
        });
      expect(await work()).toEqual({ order: 'o-1' });
      expect(await work()).toEqual({ order: 'o-1' });
      expect(runs).toBe(1);
      expect(await rows()).toEqual([{ id: { S: 'o-1' } }]);
      expect((await store.get('s', 'k1'))?.state).toBe('completed');
    });

    it('writes nothing when the handler throws, and releases the key', async () => {
      const { receiver, rows, order, store } = await setup();
      const id = { scope: 's', key: 'k2', fingerprint: FP };
      await expect(
        receiver.run(id, ({ tx }) => {
          order(tx, 'o-2');
          return Promise.reject(new Error('card declined'));
        }),
      ).rejects.toThrow('card declined');
      expect(await rows()).toEqual([]);
      expect(await store.get('s', 'k2')).toBeUndefined();
    });

    it('writes nothing when a business condition fails at commit, and releases the key', async () => {
      const { receiver, rows, order, store, orders } = await setup();
      const id = { scope: 's', key: 'k3', fingerprint: FP };
      await expect(
        receiver.run(id, ({ tx }) => {
          order(tx, 'o-3');
          tx.conditionCheck({ TableName: orders, Key: { id: { S: 'stock' } }, ConditionExpression: 'attribute_exists(id)' });
          return Promise.resolve('ok');
        }),
      ).rejects.toThrow();
      expect(await rows()).toEqual([]);
      expect(await store.get('s', 'k3')).toBeUndefined();
    });

    it('writes nothing and reports the lease lost when another claim took the key over before the commit', async () => {
      const { receiver, rows, order, store, clock } = await setup();
      const id = { scope: 's', key: 'k4', fingerprint: FP };
      let runs = 0;
      const outcome = receiver.run(id, async ({ tx }) => {
        runs++;
        order(tx, 'o-4');
        // The lease runs out while the work runs; a retry takes the key over.
        clock.advance(30_000);
        const taken = await store.claim({ scope: 's', key: 'k4', fingerprint: FP, leaseMs: 30_000, retentionMs: 60_000 });
        expect(taken.acquired).toBe(true);
        return 'late';
      });
      await expect(outcome).rejects.toBeInstanceOf(LeaseLostError);
      expect(runs).toBe(1);
      expect(await rows()).toEqual([]);
      expect((await store.get('s', 'k4'))?.state).toBe('in_progress');
    });

    it('refuses a 100th business write', async () => {
      const { store, orders } = await setup();
      await expect(
        store.transaction((tx) => {
          for (let i = 0; i < 100; i++) tx.update({ TableName: orders, Key: { id: { S: `o${i}` } }, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { N: '1' } } });
          return Promise.resolve();
        }),
      ).rejects.toThrow(RangeError);
    });
  });
}
