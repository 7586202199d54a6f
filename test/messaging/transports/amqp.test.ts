/**
 * The RabbitMQ adapter with the PostgreSQL inbox, against the real servers: duplicate deliveries, a
 * consumer SIGKILLed after commit before ack and mid-handler, a poison message, two competing consumers,
 * messages without an id, and the same consumer without the inbox.
 */
import { randomUUID } from 'node:crypto';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAmqpConsumer, type AmqpConsumer } from '../../../src/messaging/transports/amqp.js';
import {
  createInbox,
  createPostgresInboxStore,
  inboxProcessor,
  type Inbox,
  type MessageHandler,
} from '../../../src/messaging/inbox/index.js';
import type pg from 'pg';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { AMQP_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { expectRedeliveryProcessed, expectRedeliverySkipped, runChild } from './child.js';
import { count, record } from './recorder.js';
import { createEffectsSchema, writeEffect, type EffectsSchema } from '../../support/messaging.js';

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('RabbitMQ', async () => {
    const connection = await amqp.connect(AMQP_URL);
    await connection.close();
  }));

describe.runIf(available)('RabbitMQ consumer with the inbox', () => {
  let db: EffectsSchema;
  let connection: ChannelModel;
  let channel: Channel;
  const base = uniqueName('rs_amqp');
  const queues: string[] = [];
  const consumers: AmqpConsumer[] = [];

  async function queue(args: Record<string, unknown> = {}): Promise<string> {
    const name = `${base}_${queues.length}`;
    queues.push(name);
    await channel.assertQueue(name, { durable: false, arguments: args });
    return name;
  }

  function publish(queueName: string, id: string | undefined, body = 'ok'): void {
    channel.sendToQueue(queueName, Buffer.from(body), id === undefined ? {} : { messageId: id });
  }

  async function consume(queueName: string, inbox: Inbox<pg.PoolClient>, handler: MessageHandler<pg.PoolClient>, consumerName = 'billing') {
    const recorder = record(inboxProcessor(inbox, consumerName, handler));
    const own = await connection.createChannel();
    consumers.push(await startAmqpConsumer({ channel: own, queue: queueName, process: recorder.process, prefetch: 8, redriveIntervalMs: false }));
    return recorder;
  }

  function newInbox(maxAttempts = 5): Inbox<pg.PoolClient> {
    return createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts });
  }

  beforeAll(async () => {
    db = await createEffectsSchema('rs_inbox_amqp', 12);
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
  });

  afterAll(async () => {
    await Promise.all(consumers.map((c) => c.stop()));
    for (const name of queues) await channel.deleteQueue(name);
    await connection.close();
    await db.drop();
  });

  it('runs the handler once for five deliveries of one message id', async () => {
    const q = await queue();
    const id = randomUUID();
    for (let i = 0; i < 5; i += 1) publish(q, id);
    const runs = new Map<string, number>();
    const recorder = await consume(q, newInbox(), writeEffect(db, runs));
    await recorder.until((seen) => count(seen, id) === 5);
    expect(count(recorder.seen, id, 'ack')).toBe(5);
    expect(runs.get(id)).toBe(1);
    expect(await db.count('billing', id)).toBe(1);
  });

  it('skips the redelivery after a consumer is SIGKILLed between commit and ack (effect count 1)', async () => {
    const q = await queue();
    const id = randomUUID();
    publish(q, id);
    await expectRedeliverySkipped({ db, id, env: { BROKER: 'amqp', QUEUE: q }, consume: (handler) => consume(q, newInbox(), handler) });
  });

  it('persists nothing when a consumer is SIGKILLed mid-handler, and processes the redelivery', async () => {
    const q = await queue();
    const id = randomUUID();
    publish(q, id);
    await expectRedeliveryProcessed({ db, id, env: { BROKER: 'amqp', QUEUE: q }, consume: (handler) => consume(q, newInbox(), handler) });
  });

  it('dead-letters a message that crashed its consumer maxAttempts times, without running it again', async () => {
    const q = await queue();
    const id = randomUUID();
    publish(q, id, 'crashes the consumer');
    const child = { BROKER: 'amqp', SCHEMA: db.schema, CONSUMER: 'billing', CRASH: 'mid-handler', QUEUE: q, MAX_ATTEMPTS: '2' };
    expect(await runChild(child)).toBe('SIGKILL');
    expect(await runChild(child)).toBe('SIGKILL');
    const inbox = newInbox(2);
    const runs = new Map<string, number>();
    const recorder = await consume(q, inbox, writeEffect(db, runs));
    await recorder.until((seen) => count(seen, id) === 1);
    expect(recorder.seen).toEqual([{ id, disposition: 'dead_letter' }]);
    expect(runs.size).toBe(0);
    expect(await db.count('billing', id)).toBe(0);
    const letter = (await inbox.deadLetters({ consumer: 'billing' })).find((l) => l.messageId === id);
    expect(letter).toMatchObject({ attempts: 3, error: 'started 2 times without finishing (maxAttempts 2)' });
    expect(new TextDecoder().decode(letter?.body)).toBe('crashes the consumer');
  });

  it('dead-letters a poison message after maxAttempts, to the dead-letter exchange too, without blocking the others', async () => {
    const dlq = await queue();
    const q = await queue({ 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dlq });
    const poison = randomUUID();
    const good = Array.from({ length: 6 }, () => randomUUID());
    publish(q, poison, 'poison');
    for (const id of good) publish(q, id);
    const inbox = newInbox(3);
    const recorder = await consume(q, inbox, async (message, tx) => {
      if (new TextDecoder().decode(message.body) === 'poison') throw new Error('cannot parse');
      await db.write(tx, 'billing', message.id ?? '');
    });
    await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1 && good.every((id) => count(seen, id, 'ack') === 1));
    expect(count(recorder.seen, poison, 'retry')).toBe(2);
    for (const id of good) expect(await db.count('billing', id)).toBe(1);
    const letters = (await inbox.deadLetters({ consumer: 'billing' })).filter((l) => l.messageId === poison);
    expect(letters.map((l) => [l.attempts, l.error, new TextDecoder().decode(l.body)])).toEqual([[3, 'Error: cannot parse', 'poison']]);
    const routed = await waitForMessage(channel, dlq);
    expect(routed.properties.messageId).toBe(poison);
  });

  it('on a quorum queue, moves a message redelivered past the delivery limit to the dead-letter queue instead of dropping it', async () => {
    const q = `${base}_quorum_${queues.length}`;
    const dlq = `${q}_dlq`;
    queues.push(q, dlq);
    const id = randomUUID();
    // maxAttempts above the limit: the broker, not the inbox, gives up first (a store that keeps failing does the same).
    const recorder = record(inboxProcessor(newInbox(10), 'billing', () => Promise.reject(new Error('database down'))));
    consumers.push(
      await startAmqpConsumer({
        channel: await connection.createChannel(),
        queue: q,
        quorum: { deadLetterQueue: dlq, deliveryLimit: 2 },
        process: recorder.process,
        redriveIntervalMs: false,
      }),
    );
    publish(q, id, 'keeps failing');
    const letter = await waitForMessage(channel, dlq);
    expect(letter.properties.messageId).toBe(id);
    expect(letter.content.toString()).toBe('keeps failing');
    expect(count(recorder.seen, id, 'retry')).toBe(3);
    expect(await db.count('billing', id)).toBe(0);
  });

  it('refuses to consume a quorum queue that exists with a delivery limit and no dead-letter exchange', async () => {
    const q = `${base}_quorum_${queues.length}`;
    const dlq = `${q}_dlq`;
    queues.push(q, dlq);
    await channel.assertQueue(q, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 2 } });
    const own = await connection.createChannel();
    const recorder = record(inboxProcessor(newInbox(), 'billing', writeEffect(db, new Map())));
    await expect(startAmqpConsumer({ channel: own, queue: q, quorum: { deadLetterQueue: dlq }, process: recorder.process, redriveIntervalMs: false })).rejects.toThrow(
      /could not declare queue .* with dead-lettering .*inequivalent arg 'x-dead-letter-exchange'/,
    );
    await expect(startAmqpConsumer({ channel, queue: q, quorum: { deadLetterQueue: '' }, process: recorder.process })).rejects.toThrow(/"quorum.deadLetterQueue"/);
  });

  it('redrives a dead letter once when asked, through the running consumer', async () => {
    const q = await queue();
    const id = randomUUID();
    // A consumer name of its own: other tests' consumers, still running, poll their consumers' redrives.
    const name = 'redrive_redriveIntervalMs';
    publish(q, id, 'flaky');
    const inbox = newInbox(1);
    let healthy = false;
    const runs = new Map<string, number>();
    const recorder = record(
      inboxProcessor(inbox, name, async (message, tx) => {
        if (!healthy) throw new Error('downstream unavailable');
        await writeEffect(db, runs, name)(message, tx, { attempt: 1, signal: new AbortController().signal });
      }),
    );
    consumers.push(await startAmqpConsumer({ channel: await connection.createChannel(), queue: q, process: recorder.process, redriveIntervalMs: 50 }));
    await recorder.until((seen) => count(seen, id, 'dead_letter') === 1);
    healthy = true;
    expect(await inbox.redrive(name, id)).toBe(true);
    await recorder.until(() => runs.get(id) === 1);
    // Several more polls (every 50 ms) must find nothing left to redrive.
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await inbox.pendingRedrives(name)).toEqual([]);
    expect(await inbox.redrive(name, id)).toBe(false);
    expect(runs.get(id)).toBe(1);
    expect(await db.count(name, id)).toBe(1);
  });

  it('commits each message once with two consumer instances competing for 20 ids published 3 times each', async () => {
    const q = await queue();
    const ids = Array.from({ length: 20 }, () => randomUUID());
    for (let copy = 0; copy < 3; copy += 1) for (const id of ids) publish(q, id);
    const runs = new Map<string, number>();
    const first = await consume(q, newInbox(), writeEffect(db, runs, 'competing'), 'competing');
    const second = await consume(q, newInbox(), writeEffect(db, runs, 'competing'), 'competing');
    await Promise.all([
      first.until(() => first.seen.length + second.seen.length === 60),
      second.until(() => first.seen.length + second.seen.length === 60),
    ]);
    expect([...first.seen, ...second.seen].every((s) => s.disposition === 'ack')).toBe(true);
    expect(first.seen.length).toBeGreaterThan(0);
    expect(second.seen.length).toBeGreaterThan(0);
    for (const id of ids) {
      expect(runs.get(id)).toBe(1);
      expect(await db.count('competing', id)).toBe(1);
    }
  });

  it('rejects a message without an id, or with one the extractor cannot find, without running the handler', async () => {
    const q = await queue();
    publish(q, undefined, 'no id');
    const runs = new Map<string, number>();
    const recorder = await consume(q, newInbox(), writeEffect(db, runs));
    await recorder.until((seen) => seen.length === 1);
    expect(recorder.seen).toEqual([{ id: undefined, disposition: 'reject' }]);
    expect(runs.size).toBe(0);
  });

  it('takes the id from a user extractor', async () => {
    const q = await queue();
    const id = randomUUID();
    channel.sendToQueue(q, Buffer.from('x'), { headers: { 'x-event-id': id } });
    channel.sendToQueue(q, Buffer.from('x'), { headers: { 'x-event-id': id } });
    const runs = new Map<string, number>();
    const recorder = record(inboxProcessor(newInbox(), 'billing', writeEffect(db, runs)));
    consumers.push(
      await startAmqpConsumer({
        channel: await connection.createChannel(),
        queue: q,
        process: recorder.process,
        messageId: (message) => String(message.properties.headers?.['x-event-id']),
        redriveIntervalMs: false,
      }),
    );
    await recorder.until((seen) => count(seen, id, 'ack') === 2);
    expect(runs.get(id)).toBe(1);
  });

  it('runs a plain processor without the inbox (at least once; the bench baseline) and validates options', async () => {
    const q = await queue();
    const id = randomUUID();
    publish(q, id);
    publish(q, id);
    let runs = 0;
    const recorder = record(() => {
      runs += 1;
      return Promise.resolve('ack');
    });
    consumers.push(await startAmqpConsumer({ channel: await connection.createChannel(), queue: q, process: recorder.process }));
    await recorder.until((seen) => seen.length === 2);
    expect(runs).toBe(2);
    await expect(startAmqpConsumer({ channel, queue: q, process: recorder.process, prefetch: 0 })).rejects.toThrow(/"prefetch".*got 0/);
    await expect(startAmqpConsumer({ channel, queue: '', process: recorder.process })).rejects.toThrow(/"queue"/);
    await expect(startAmqpConsumer({ channel, queue: q, process: recorder.process, redriveIntervalMs: 0 })).rejects.toThrow(/"redriveIntervalMs".*got 0/);
  });
});

async function waitForMessage(channel: Channel, queue: string): Promise<amqp.GetMessage> {
  for (let i = 0; i < 100; i += 1) {
    const message = await channel.get(queue, { noAck: true });
    if (message !== false) return message;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no message arrived on ${queue}`);
}
