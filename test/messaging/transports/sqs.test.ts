/**
 * `sqsBatchHandler` invoked in-process with Lambda SQS events shaped as AWS's samples (standard and FIFO
 * queues), on the SQLite inbox store: duplicates inside a batch and across batches, a record that fails
 * twice then succeeds, a poison record dead-lettered, FIFO group order; effects counted in the business
 * table each record writes through the inbox's transaction.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, createSqliteInboxStore, type Inbox } from '../../../src/messaging/inbox/index.js';
import { sqsBatchHandler } from '../../../src/messaging/transports/sqs.js';

const QUEUE = 'arn:aws:sqs:us-east-1:123456789012:orders';

/** AWS's sample SQS record; `receives` is `ApproximateReceiveCount`. */
function record(id: string, body: string, options: { receives?: number; group?: string; attribute?: string } = {}): SQSRecord {
  return {
    messageId: id,
    receiptHandle: `handle-${id}-${options.receives ?? 1}`,
    body,
    attributes: {
      ApproximateReceiveCount: String(options.receives ?? 1),
      SentTimestamp: '1545082649183',
      SenderId: 'AIDAIENQZJOLO23YVJ4VO',
      ApproximateFirstReceiveTimestamp: '1545082649185',
      ...(options.group !== undefined && { MessageGroupId: options.group, MessageDeduplicationId: id, SequenceNumber: '1' }),
    },
    messageAttributes: options.attribute === undefined ? {} : { orderId: { stringValue: options.attribute, dataType: 'String' } },
    md5OfBody: 'e4e68fb7bd0e697a0ae8f1bb342846b3',
    eventSource: 'aws:sqs',
    eventSourceARN: options.group === undefined ? QUEUE : `${QUEUE}.fifo`,
    awsRegion: 'us-east-1',
  };
}

function batch(...records: SQSRecord[]): SQSEvent {
  return { Records: records };
}

describe('sqsBatchHandler', () => {
  let database: Database;
  let inbox: Inbox<Database>;
  /** Records that make the handler throw, and how many more times. */
  let failures: Map<string, number>;
  let runs: string[];

  beforeEach(() => {
    database = new BetterSqlite3(':memory:');
    database.exec('CREATE TABLE effects (body TEXT NOT NULL)');
    inbox = createInbox({ store: createSqliteInboxStore({ database }), maxAttempts: 3 });
    failures = new Map();
    runs = [];
  });
  afterEach(async () => {
    await inbox.close();
  });

  const handler = () =>
    sqsBatchHandler(inbox, (rec, tx) => {
      runs.push(rec.body);
      const left = failures.get(rec.body) ?? 0;
      if (left > 0) {
        failures.set(rec.body, left - 1);
        return Promise.reject(new Error(`${rec.body} failed`));
      }
      tx.prepare('INSERT INTO effects (body) VALUES (?)').run(rec.body);
      return Promise.resolve();
    });

  function effects(): string[] {
    return (database.prepare('SELECT body FROM effects ORDER BY rowid').all() as { body: string }[]).map((row) => row.body);
  }

  it('applies a batch of 10 with duplicates inside it and across batches exactly once each', async () => {
    const handle = handler();
    const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const first = await handle(batch(...ids.map((id) => record(id, `m-${id}`)), record('a', 'm-a'), record('c', 'm-c')));
    expect(first).toEqual({ batchItemFailures: [] });
    // SQS redelivers half of them (a visibility timeout ran out) with a new one.
    const second = await handle(batch(record('a', 'm-a', { receives: 2 }), record('b', 'm-b', { receives: 2 }), record('z', 'm-z')));
    expect(second).toEqual({ batchItemFailures: [] });
    expect(effects().sort()).toEqual([...ids, 'z'].map((id) => `m-${id}`));
    expect(runs.filter((body) => body === 'm-a')).toHaveLength(1);
  });

  it('reports a record that fails twice, then applies it once on the third delivery', async () => {
    const handle = handler();
    failures.set('m-x', 2);
    expect(await handle(batch(record('x', 'm-x'), record('y', 'm-y')))).toEqual({ batchItemFailures: [{ itemIdentifier: 'x' }] });
    expect(await handle(batch(record('x', 'm-x', { receives: 2 })))).toEqual({ batchItemFailures: [{ itemIdentifier: 'x' }] });
    expect(await handle(batch(record('x', 'm-x', { receives: 3 })))).toEqual({ batchItemFailures: [] });
    expect(await handle(batch(record('x', 'm-x', { receives: 4 })))).toEqual({ batchItemFailures: [] });
    expect(effects()).toEqual(['m-y', 'm-x']);
    expect(runs.filter((body) => body === 'm-x')).toHaveLength(3);
  });

  it('dead-letters a poison record in the inbox after maxAttempts and acknowledges it', async () => {
    const handle = handler();
    failures.set('m-p', 1_000);
    for (let receives = 1; receives < 3; receives++) {
      expect(await handle(batch(record('p', 'm-p', { receives })))).toEqual({ batchItemFailures: [{ itemIdentifier: 'p' }] });
    }
    expect(await handle(batch(record('p', 'm-p', { receives: 3 })))).toEqual({ batchItemFailures: [] });
    // Dead: a later delivery does not run it again.
    expect(await handle(batch(record('p', 'm-p', { receives: 4 })))).toEqual({ batchItemFailures: [] });
    expect(runs.filter((body) => body === 'm-p')).toHaveLength(3);
    expect(effects()).toEqual([]);
    const letters = await inbox.deadLetters();
    expect(letters.map((letter) => [letter.consumer, letter.messageId])).toEqual([[QUEUE, 'p']]);
    expect(Buffer.from(letters[0]?.body ?? []).toString()).toBe('m-p');
  });

  it('keeps FIFO group order: a group stops at its first failure, other groups go on', async () => {
    const handle = handler();
    failures.set('g1-2', 1);
    const event = batch(
      record('1', 'g1-1', { group: 'g1' }),
      record('2', 'g1-2', { group: 'g1' }),
      record('3', 'g2-1', { group: 'g2' }),
      record('4', 'g1-3', { group: 'g1' }),
      record('5', 'g2-2', { group: 'g2' }),
    );
    expect(await handle(event)).toEqual({ batchItemFailures: [{ itemIdentifier: '2' }, { itemIdentifier: '4' }] });
    expect(runs.filter((body) => body.startsWith('g1'))).toEqual(['g1-1', 'g1-2']);
    expect(await handle(batch(record('2', 'g1-2', { group: 'g1', receives: 2 }), record('4', 'g1-3', { group: 'g1', receives: 2 })))).toEqual({ batchItemFailures: [] });
    expect(effects().filter((body) => body.startsWith('g1'))).toEqual(['g1-1', 'g1-2', 'g1-3']);
    expect(effects().filter((body) => body.startsWith('g2'))).toEqual(['g2-1', 'g2-2']);
  });

  it('dedups by a message attribute of your choosing, and reports a record without one', async () => {
    const handle = sqsBatchHandler(
      inbox,
      (rec, tx) => {
        tx.prepare('INSERT INTO effects (body) VALUES (?)').run(rec.body);
        return Promise.resolve();
      },
      { messageId: (rec) => rec.messageAttributes['orderId']?.stringValue, consumer: 'orders' },
    );
    // The producer sent one order twice: two SQS message ids, one order id.
    const result = await handle(batch(record('m1', 'o-1', { attribute: 'o-1' }), record('m2', 'o-1 again', { attribute: 'o-1' }), record('m3', 'none')));
    expect(result).toEqual({ batchItemFailures: [{ itemIdentifier: 'm3' }] });
    expect(effects()).toEqual(['o-1']);
  });

  it('refuses a queue maxReceiveCount that does not exceed the inbox maxAttempts', () => {
    expect(() => sqsBatchHandler(inbox, () => Promise.resolve(), { maxReceiveCount: 3 })).toThrow(/maxReceiveCount/);
    expect(() => sqsBatchHandler(inbox, () => Promise.resolve(), { maxReceiveCount: 4 })).not.toThrow();
  });
});
