/**
 * Outbox relay throughput and idle latency, each next to the raw broker publish rate measured in the same
 * run. Throughput: `count` rows pre-filled over `keys` keys, drained by two `runOnce` loops of one relay
 * (`batchSize: 1000`). Raw: `publisher.publish` called with `RAW_IN_FLIGHT` publishes in flight, each
 * awaiting its confirm / PubAck. Latency: the relay started (LISTEN/NOTIFY), one message enqueued and
 * committed at a time with a small gap; from just before COMMIT to the relay's `published` event.
 */
import { randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import { connect, type NatsConnection } from 'nats';
import { createAmqpPublisher } from '../../src/messaging/transports/amqp.js';
import { createNatsPublisher } from '../../src/messaging/transports/nats.js';
import { createOutbox, type Outbox } from '../../src/messaging/outbox/outbox.js';
import type { OutboxPublisher } from '../../src/messaging/outbox/publisher.js';
import { createRelay } from '../../src/messaging/outbox/relay.js';
import { forEachConcurrently, quantile, type BenchContext } from './context.js';
import type { Broker } from './inbox.js';

/** Publishes in flight when measuring the broker's raw rate. */
export const RAW_IN_FLIGHT = 500;

export interface RelayResult {
  readonly broker: Broker;
  readonly messages: number;
  readonly keys: number;
  readonly relayPerSecond: number;
  /** Rows the relay actually marked sent (must equal `messages`). */
  readonly sent: number;
  readonly rawPerSecond: number;
  readonly latencySamples: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

export interface RelaySizes {
  readonly messages: number;
  readonly keys: number;
  readonly latencySamples: number;
  /** Gap between latency samples, in milliseconds. */
  readonly gapMs: number;
}

const payload = JSON.stringify({ orderId: 'o-1', amountCents: 1250, currency: 'EUR' });

async function prefill(ctx: BenchContext, outbox: Outbox, topic: string, sizes: RelaySizes): Promise<void> {
  const perTx = 250;
  await forEachConcurrently(Math.ceil(sizes.messages / perTx), 4, async (chunk) => {
    const client = await ctx.pool.connect();
    try {
      await client.query('BEGIN');
      for (let i = chunk * perTx; i < Math.min(sizes.messages, (chunk + 1) * perTx); i++) {
        await outbox.enqueue(client, { topic, key: `k${i % sizes.keys}`, payload });
      }
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  });
}

async function relayThroughput(ctx: BenchContext, outbox: Outbox, publisher: OutboxPublisher, topic: string, sizes: RelaySizes): Promise<{ perSecond: number; sent: number }> {
  await prefill(ctx, outbox, topic, sizes);
  const before = await sentCount(ctx);
  const relay = createRelay({ pool: ctx.pool, outbox, publisher, batchSize: 1000 });
  let total = 0;
  const loop = async (): Promise<void> => {
    while (total < sizes.messages) {
      const claimed = await relay.runOnce();
      total += claimed;
      // The other loop holds the remaining keys' heads; wait for it rather than spin on empty claims.
      if (claimed === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    }
  };
  const started = performance.now();
  await Promise.all([loop(), loop()]);
  const elapsed = performance.now() - started;
  return { perSecond: (sizes.messages / elapsed) * 1000, sent: (await sentCount(ctx)) - before };
}

async function sentCount(ctx: BenchContext): Promise<number> {
  const { rows } = await ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${ctx.schema}".outbox WHERE status = 1`);
  return rows[0]?.n ?? 0;
}

async function rawRate(publisher: OutboxPublisher, topic: string, count: number): Promise<number> {
  const started = performance.now();
  await forEachConcurrently(count, RAW_IN_FLIGHT, async (i) => {
    await publisher.publish({ id: randomUUID(), topic, key: `k${i}`, payload: Buffer.from(payload), headers: {}, attempt: 1, createdAt: Date.now() }, new AbortController().signal);
  });
  return (count / (performance.now() - started)) * 1000;
}

async function idleLatency(ctx: BenchContext, outbox: Outbox, publisher: OutboxPublisher, topic: string, sizes: RelaySizes): Promise<number[]> {
  const waiting = new Map<string, () => void>();
  const relay = createRelay({
    pool: ctx.pool,
    outbox,
    publisher,
    onEvent: (event) => {
      if (event.type === 'published' && event.id !== undefined) waiting.get(event.id)?.();
    },
  });
  relay.start();
  const samples: number[] = [];
  try {
    // Let the relay open its LISTEN connection and go idle first.
    await new Promise((resolve) => setTimeout(resolve, 200));
    for (let i = 0; i < sizes.latencySamples; i++) {
      const client = await ctx.pool.connect();
      try {
        await client.query('BEGIN');
        const id = await outbox.enqueue(client, { topic, key: `lat-${i}`, payload });
        const published = new Promise<void>((resolve) => waiting.set(id, resolve));
        const started = performance.now();
        await client.query('COMMIT');
        await published;
        samples.push(performance.now() - started);
        waiting.delete(id);
      } finally {
        client.release();
      }
      await new Promise((resolve) => setTimeout(resolve, sizes.gapMs));
    }
  } finally {
    await relay.stop();
  }
  return samples.sort((a, b) => a - b);
}

async function measure(ctx: BenchContext, broker: Broker, publisher: OutboxPublisher, topic: string, sizes: RelaySizes): Promise<RelayResult> {
  const outbox = createOutbox({ schema: ctx.schema });
  const raw = await rawRate(publisher, topic, sizes.messages);
  const throughput = await relayThroughput(ctx, outbox, publisher, topic, sizes);
  const latencies = await idleLatency(ctx, outbox, publisher, topic, sizes);
  return {
    broker,
    messages: sizes.messages,
    keys: sizes.keys,
    relayPerSecond: throughput.perSecond,
    sent: throughput.sent,
    rawPerSecond: raw,
    latencySamples: latencies.length,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
  };
}

export async function relayOnRabbit(ctx: BenchContext, sizes: RelaySizes): Promise<RelayResult> {
  const queue = `bench.${ctx.runId}.relay`;
  const connection = await amqplib.connect(ctx.amqpUrl);
  const channel = await connection.createChannel();
  // The default exchange routes by queue name; `mandatory` makes an unroutable publish fail, not vanish.
  await channel.assertQueue(queue, { durable: true });
  const publisher = createAmqpPublisher({ url: ctx.amqpUrl });
  try {
    return await measure(ctx, 'RabbitMQ', publisher, queue, sizes);
  } finally {
    await publisher.close();
    await channel.deleteQueue(queue);
    await connection.close();
  }
}

export async function relayOnNats(ctx: BenchContext, sizes: RelaySizes): Promise<RelayResult> {
  const nc: NatsConnection = await connect({ servers: ctx.natsUrl });
  const jsm = await nc.jetstreamManager();
  const stream = `BENCH_RELAY_${ctx.runId}`;
  const subject = `bench_${ctx.runId}.relay`;
  await jsm.streams.add({ name: stream, subjects: [subject] });
  const publisher = createNatsPublisher({ connection: nc });
  try {
    return await measure(ctx, 'NATS JetStream', publisher, subject, sizes);
  } finally {
    await publisher.close();
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.drain();
  }
}
