/**
 * `sqsBatchHandler` on the DynamoDB inbox store (DynamoDB Local), invoked in-process with Lambda SQS events
 * shaped as AWS's samples: a batch of 10 with duplicates inside it and across batches, a record that fails
 * twice then succeeds, a poison record dead-lettered. Each record's effect is an item its handler writes
 * through the inbox's transaction, counted in the business table: every message applied exactly once.
 */
import { randomUUID } from 'node:crypto';
import { CreateTableCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDynamodbInboxStore, type DynamodbTransaction } from '../../../src/dynamodb.js';
import { createInbox, type Inbox } from '../../../src/messaging/inbox/index.js';
import { sqsBatchHandler } from '../../../src/messaging/transports/sqs.js';
import { dynamodbTableDefinition } from '../../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile } from '../../support/dynamodb.js';
import { uniqueName } from '../../support/services.js';

const TABLE = uniqueName('rs_sqs');
const EFFECTS = `${TABLE}_effects`;
const QUEUE = 'arn:aws:sqs:us-east-1:123456789012:orders';
const local = await dynamodbLocalForFile();

/** AWS's sample SQS record; `receives` is `ApproximateReceiveCount`. */
function record(id: string, body: string, receives = 1): SQSRecord {
  return {
    messageId: id,
    receiptHandle: `handle-${id}-${receives}`,
    body,
    attributes: {
      ApproximateReceiveCount: String(receives),
      SentTimestamp: '1545082649183',
      SenderId: 'AIDAIENQZJOLO23YVJ4VO',
      ApproximateFirstReceiveTimestamp: '1545082649185',
    },
    messageAttributes: {},
    md5OfBody: 'e4e68fb7bd0e697a0ae8f1bb342846b3',
    eventSource: 'aws:sqs',
    eventSourceARN: QUEUE,
    awsRegion: 'us-east-1',
  };
}

function batch(...records: SQSRecord[]): SQSEvent {
  return { Records: records };
}

if (local !== undefined) {
  beforeAll(async () => {
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: TABLE })));
    await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table: EFFECTS, keySchema: { partitionKey: 'id', sortKey: undefined } })));
  });
  afterAll(() => local.stop());

  describe('sqsBatchHandler on the DynamoDB inbox', () => {
    let stores = 0;
    /** A fresh inbox (its own prefix), the handler, and what it ran and wrote. */
    function setup(): { inbox: Inbox<DynamodbTransaction>; handle: ReturnType<typeof sqsBatchHandler>; runs: string[]; failures: Map<string, number>; effects: () => Promise<string[]> } {
      const prefix = `q${++stores}`;
      const inbox = createInbox({ store: createDynamodbInboxStore({ client: local!.client, table: TABLE, prefix }), maxAttempts: 3 });
      const runs: string[] = [];
      const failures = new Map<string, number>();
      const handle = sqsBatchHandler(inbox, (rec, tx) => {
        runs.push(rec.body);
        const left = failures.get(rec.body) ?? 0;
        if (left > 0) {
          failures.set(rec.body, left - 1);
          return Promise.reject(new Error(`${rec.body} failed`));
        }
        tx.put({ TableName: EFFECTS, Item: { id: { S: randomUUID() }, run: { S: prefix }, body: { S: rec.body } } });
        return Promise.resolve();
      });
      const effects = async (): Promise<string[]> => {
        const { Items } = await local!.client.send(
          new ScanCommand({ TableName: EFFECTS, ConsistentRead: true, FilterExpression: '#run = :run', ExpressionAttributeNames: { '#run': 'run' }, ExpressionAttributeValues: { ':run': { S: prefix } } }),
        );
        return (Items ?? []).map((item) => item.body?.S ?? '').sort();
      };
      return { inbox, handle, runs, failures, effects };
    }

    it('applies a batch of 10 with duplicates inside it and across batches exactly once each', async () => {
      const { handle, runs, effects } = setup();
      const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
      const first = await handle(batch(...ids.map((id) => record(id, `m-${id}`)), record('a', 'm-a'), record('c', 'm-c')));
      expect(first).toEqual({ batchItemFailures: [] });
      // SQS redelivers some of them (a visibility timeout ran out) with a new one, twice at once.
      const again = batch(record('a', 'm-a', 2), record('b', 'm-b', 2), record('z', 'm-z'), record('z', 'm-z'));
      expect(await Promise.all([handle(again), handle(again)])).toEqual([{ batchItemFailures: [] }, { batchItemFailures: [] }]);
      expect(await effects()).toEqual([...ids, 'z'].map((id) => `m-${id}`));
      for (const id of [...ids, 'z']) expect(runs.filter((body) => body === `m-${id}`)).toHaveLength(1);
    });

    it('reports a record that fails twice, then applies it once on the third delivery', async () => {
      const { handle, runs, failures, effects } = setup();
      failures.set('m-x', 2);
      expect(await handle(batch(record('x', 'm-x'), record('y', 'm-y')))).toEqual({ batchItemFailures: [{ itemIdentifier: 'x' }] });
      expect(await handle(batch(record('x', 'm-x', 2), record('y', 'm-y', 2)))).toEqual({ batchItemFailures: [{ itemIdentifier: 'x' }] });
      expect(await handle(batch(record('x', 'm-x', 3)))).toEqual({ batchItemFailures: [] });
      expect(await handle(batch(record('x', 'm-x', 4)))).toEqual({ batchItemFailures: [] });
      expect(await effects()).toEqual(['m-x', 'm-y']);
      expect(runs.filter((body) => body === 'm-x')).toHaveLength(3);
      expect(runs.filter((body) => body === 'm-y')).toHaveLength(1);
    });

    it('dead-letters a poison record in the inbox after maxAttempts and acknowledges it, the rest of its batches applied', async () => {
      const { inbox, handle, runs, failures, effects } = setup();
      failures.set('m-p', 1_000);
      for (let receives = 1; receives < 3; receives++) {
        expect(await handle(batch(record('p', 'm-p', receives), record(`ok-${receives}`, `m-ok-${receives}`)))).toEqual({ batchItemFailures: [{ itemIdentifier: 'p' }] });
      }
      expect(await handle(batch(record('p', 'm-p', 3)))).toEqual({ batchItemFailures: [] });
      // Dead: a later delivery does not run it again.
      expect(await handle(batch(record('p', 'm-p', 4)))).toEqual({ batchItemFailures: [] });
      expect(runs.filter((body) => body === 'm-p')).toHaveLength(3);
      expect(await effects()).toEqual(['m-ok-1', 'm-ok-2']);
      const letters = await inbox.deadLetters();
      expect(letters.map((letter) => [letter.consumer, letter.messageId, letter.attempts])).toEqual([[QUEUE, 'p', 3]]);
      expect(Buffer.from(letters[0]?.body ?? []).toString()).toBe('m-p');
    });
  });
}
