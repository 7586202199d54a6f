/**
 * Inbox overhead: messages/s through the broker adapter with `inboxProcessor` (dedup mark + attempt row +
 * business INSERT in one transaction) against the same adapter with a plain processor that does the same
 * business INSERT in a transaction of its own. Each run drains a queue (or durable consumer) pre-filled
 * with `count` messages; the clock runs from the subscription to the last settled message.
 */
import amqplib from 'amqplib';
import { AckPolicy, connect, nanos, type NatsConnection } from 'nats';
import type pg from 'pg';
import { startAmqpConsumer } from '../../src/messaging/transports/amqp.js';
import { startNatsConsumer } from '../../src/messaging/transports/nats.js';
import { createInbox } from '../../src/messaging/inbox/inbox.js';
import { createPostgresInboxStore } from '../../src/messaging/inbox/postgres.js';
import { inboxProcessor, type BrokerMessage, type Disposition, type MessageProcessor } from '../../src/messaging/inbox/processor.js';
import { effectInsert, forEachConcurrently, type BenchContext } from './context.js';

export type Broker = 'RabbitMQ' | 'NATS JetStream';

export interface InboxResult {
  readonly broker: Broker;
  readonly withInbox: boolean;
  readonly messages: number;
  readonly perSecond: number;
}

/** Concurrent deliveries per consumer (AMQP prefetch, NATS max_messages). */
const IN_FLIGHT = 64;

function processors(ctx: BenchContext, label: string): { withInbox: MessageProcessor; without: MessageProcessor } {
  const insert = effectInsert(ctx.schema);
  const inbox = createInbox({ store: createPostgresInboxStore({ pool: ctx.pool, schema: ctx.schema }) });
  const withInbox = inboxProcessor(inbox, `bench-${label}`, async (message, tx) => {
    await tx.query(insert, [message.id, Buffer.from(message.body).toString('utf8')]);
  });
  const without = async (message: BrokerMessage): Promise<Disposition> => {
    const client: pg.PoolClient = await ctx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(insert, [message.id, Buffer.from(message.body).toString('utf8')]);
      await client.query('COMMIT');
      return 'ack';
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  };
  return { withInbox, without };
}

/** Wraps `inner` to resolve `done` once `count` messages were settled; returns the wrapped processor. */
function counting(inner: MessageProcessor, count: number): { process: MessageProcessor; done: Promise<void> } {
  let settled = 0;
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const process: MessageProcessor = async (message) => {
    const disposition = await inner(message);
    if (++settled === count) finish();
    return disposition;
  };
  return { process, done };
}

const body = (i: number): Buffer => Buffer.from(JSON.stringify({ orderId: `o-${i}`, amountCents: 1250 + i }));

export async function inboxOnRabbit(ctx: BenchContext, count: number): Promise<InboxResult[]> {
  const connection = await amqplib.connect(ctx.amqpUrl);
  const results: InboxResult[] = [];
  try {
    const { withInbox, without } = processors(ctx, 'amqp');
    for (const [withIt, processor] of [[false, without], [true, withInbox]] as const) {
      const queue = `bench.${ctx.runId}.inbox.${withIt ? 'with' : 'without'}`;
      const confirm = await connection.createConfirmChannel();
      await confirm.assertQueue(queue, { durable: true });
      for (let i = 0; i < count; i++) confirm.sendToQueue(queue, body(i), { messageId: `${queue}-${i}`, persistent: true });
      await confirm.waitForConfirms();
      const channel = await connection.createChannel();
      const { process, done } = counting(processor, count);
      const started = performance.now();
      const consumer = await startAmqpConsumer({ channel, queue, process, prefetch: IN_FLIGHT, redriveIntervalMs: false });
      await done;
      const elapsed = performance.now() - started;
      await consumer.stop();
      await confirm.deleteQueue(queue);
      await confirm.close();
      await channel.close();
      results.push({ broker: 'RabbitMQ', withInbox: withIt, messages: count, perSecond: (count / elapsed) * 1000 });
    }
  } finally {
    await connection.close();
  }
  return results;
}

export async function inboxOnNats(ctx: BenchContext, count: number): Promise<InboxResult[]> {
  const nc: NatsConnection = await connect({ servers: ctx.natsUrl });
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const stream = `BENCH_INBOX_${ctx.runId}`;
  const results: InboxResult[] = [];
  try {
    await jsm.streams.add({ name: stream, subjects: [`bench_${ctx.runId}.inbox.>`] });
    const { withInbox, without } = processors(ctx, 'nats');
    for (const [withIt, processor] of [[false, without], [true, withInbox]] as const) {
      const label = withIt ? 'with' : 'without';
      const subject = `bench_${ctx.runId}.inbox.${label}`;
      await jsm.consumers.add(stream, { durable_name: label, ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000), filter_subject: subject });
      await forEachConcurrently(count, 256, async (i) => {
        await js.publish(subject, body(i), { msgID: `${subject}-${i}` });
      });
      const { process, done } = counting(processor, count);
      const started = performance.now();
      const consumer = await startNatsConsumer({ jetstream: js, stream, consumer: label, process, maxMessages: IN_FLIGHT, redriveIntervalMs: false });
      await done;
      const elapsed = performance.now() - started;
      await consumer.stop();
      results.push({ broker: 'NATS JetStream', withInbox: withIt, messages: count, perSecond: (count / elapsed) * 1000 });
    }
  } finally {
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.drain();
  }
  return results;
}
