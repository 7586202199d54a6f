/**
 * The relay publishing to the real RabbitMQ and NATS JetStream: ids on the wire, per-key order, an
 * unroutable message, a connection lost while its confirm channel opens, and a broker connection cut
 * mid-run (a TCP proxy we close and reopen, so the shared brokers keep running for other test files) with
 * zero loss.
 */
import { once } from 'node:events';
import * as net from 'node:net';
import amqplib, { type Channel, type ChannelModel } from 'amqplib';
import { connect, StorageType, type JetStreamManager, type NatsConnection } from 'nats';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAmqpPublisher } from '../../../src/messaging/transports/amqp.js';
import { createNatsPublisher, NATS_KEY_HEADER } from '../../../src/messaging/transports/nats.js';
import { createOutbox, createRelay, PublishError, type Outbox, type OutboxEvent, type OutboxPublisher, type Relay } from '../../../src/messaging/outbox/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import { AMQP_URL, NATS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { outboxBacklog, waitUntil } from '../../support/outbox.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

const postgres = await postgresAvailable();
const rabbit = await serviceAvailable('RabbitMQ', async () => {
  const connection = await amqplib.connect(AMQP_URL);
  await connection.close();
});
const nats = await serviceAvailable('NATS JetStream', async () => {
  const nc = await connect({ servers: NATS_URL, timeout: 2_000 });
  await (await nc.jetstreamManager()).getAccountInfo();
  await nc.close();
});

let db: TestSchema;
let outbox: Outbox;
const relays: Relay[] = [];

if (postgres) {
  beforeAll(async () => {
    db = await createTestSchema('rs_outbox_brk', 12);
    outbox = createOutbox({ schema: db.schema });
  });
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop()));
    await db.pool.query(`TRUNCATE "${db.schema}".outbox`);
  });
  afterAll(async () => {
    await db.drop();
  });
}

async function enqueue(topic: string, key: string, payload: string): Promise<string> {
  const client: pg.PoolClient = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const id = await outbox.enqueue(client, { topic, key, payload });
    await client.query('COMMIT');
    return id;
  } finally {
    client.release();
  }
}

/** Enqueues `perKey` messages on each of `keys` keys (keys concurrently, each key in order); returns the ids. */
async function enqueueMany(topic: string, keys: number, perKey: number, tag = ''): Promise<string[]> {
  const ids = await Promise.all(
    Array.from({ length: keys }, async (_, k) => {
      const mine: string[] = [];
      for (let n = 0; n < perKey; n++) mine.push(await enqueue(topic, `key-${k}`, JSON.stringify({ k, n, tag })));
      return mine;
    }),
  );
  return ids.flat();
}

const pending = async (): Promise<number> => (await outbox.status(db.pool)).pending;

/**
 * Runs a relay on `publisher` through a broker outage: `keys` × 10 messages enqueued before `proxy` cuts
 * the connection and as many during the cut; once the relay has retried, the proxy is restored and the
 * run waits until nothing is pending, then stops the relay and the publisher and cuts the proxy again (so
 * what is read next comes from the broker, not the publisher). Returns the ids enqueued before and during.
 */
async function runThroughOutage(publisher: OutboxPublisher, proxy: TcpProxy, topic: string, keys: number): Promise<{ before: string[]; during: string[] }> {
  const retries: OutboxEvent[] = [];
  const relay = createRelay({
    pool: db.pool,
    outbox,
    publisher,
    pollIntervalMs: 50,
    publishTimeoutMs: 2_000,
    leaseMs: 5_000,
    backoffBaseMs: 20,
    backoffMaxMs: 200,
    maxAttempts: 1_000,
    onEvent: (e) => void (e.type === 'retry' && retries.push(e)),
  });
  relays.push(relay);
  relay.start();
  const before = await enqueueMany(topic, keys, 10, 'before');
  await proxy.cut();
  const during = await enqueueMany(topic, keys, 10, 'during');
  await waitUntil(() => retries.length > 0);
  await proxy.restore();
  await waitUntil(async () => (await pending()) === 0, 20_000, () => outboxBacklog(db.pool, db.schema));
  await relay.stop();
  await publisher.close();
  await proxy.cut();
  return { before, during };
}

describe.runIf(postgres && rabbit)('outbox relay to RabbitMQ', () => {
  let connection: ChannelModel;
  let channel: Channel;
  const queues: string[] = [];

  beforeAll(async () => {
    connection = await amqplib.connect(AMQP_URL);
    channel = await connection.createChannel();
  });
  afterAll(async () => {
    for (const queue of queues) await channel.deleteQueue(queue);
    await connection.close();
  });

  async function queue(): Promise<string> {
    const name = uniqueName('rs_outbox_q');
    await channel.assertQueue(name, { durable: false });
    queues.push(name);
    return name;
  }

  async function drainQueue(name: string): Promise<amqplib.GetMessage[]> {
    const messages: amqplib.GetMessage[] = [];
    for (;;) {
      const message = await channel.get(name, { noAck: true });
      if (message === false) return messages;
      messages.push(message);
    }
  }

  it('publishes with confirms, messageId = outbox id, each key in order', async () => {
    const q = await queue();
    const publisher = createAmqpPublisher({ url: AMQP_URL });
    const relay = createRelay({ pool: db.pool, outbox, publisher, pollIntervalMs: 50, perKeyLimit: 5 });
    relays.push(relay);
    relay.start();
    const ids = await enqueueMany(q, 8, 20);
    await waitUntil(async () => (await pending()) === 0, 15_000, () => outboxBacklog(db.pool, db.schema));
    await relay.stop();
    await publisher.close();
    const messages = await drainQueue(q);
    expect(messages.map((m) => m.properties.messageId as string).sort()).toEqual([...ids].sort());
    const perKey = new Map<string, number[]>();
    for (const m of messages) {
      const { k, n } = JSON.parse(m.content.toString()) as { k: number; n: number };
      expect(m.properties.headers?.['x-retrysafe-key']).toBe(`key-${k}`);
      expect(m.properties.deliveryMode).toBe(2);
      perKey.set(`key-${k}`, [...(perKey.get(`key-${k}`) ?? []), n]);
    }
    for (const sequence of perKey.values()) expect(sequence).toEqual(Array.from({ length: 20 }, (_, n) => n));
  });

  it('fails an unroutable message (mandatory) instead of counting it sent', async () => {
    const publisher = createAmqpPublisher({ url: AMQP_URL });
    const events: OutboxEvent[] = [];
    const relay = createRelay({ pool: db.pool, outbox, publisher, maxAttempts: 1, onEvent: (e) => void events.push(e) });
    relays.push(relay);
    const id = await enqueue(uniqueName('rs_no_such_queue'), 'k', 'lost?');
    await waitUntil(async () => (await relay.runOnce()) > 0 || events.length > 0);
    await publisher.close();
    expect(events.map((e) => [e.type, e.id])).toEqual([['dead_lettered', id]]);
    expect(events[0]?.error).toMatch(/unroutable/);
  });

  it('gives up a connect that gets no answer after connectTimeoutMs, and dials again on the next publish', async () => {
    // A server that accepts and never speaks: the AMQP handshake would wait forever.
    const silent = net.createServer(() => undefined);
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const address = silent.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    const accepted: net.Socket[] = [];
    silent.on('connection', (socket) => accepted.push(socket));
    const publisher = createAmqpPublisher({ url: `amqp://127.0.0.1:${address.port}`, connectTimeoutMs: 200 });
    const message = { id: 'x', topic: 't', key: 'k', payload: new Uint8Array(), headers: {}, createdAt: 0, attempt: 1 };
    try {
      for (let attempt = 1; attempt <= 2; attempt++) {
        // Without the timeout this publish would never settle (the test would time out).
        await expect(publisher.publish(message, new AbortController().signal)).rejects.toBeInstanceOf(PublishError);
        expect(accepted).toHaveLength(attempt);
      }
    } finally {
      await publisher.close();
      for (const socket of accepted) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it.each(['reset', 'silent'] as const)(
    'fails a publish whose connection is lost (%s) while its confirm channel opens, then reconnects',
    async (fault) => {
      const q = await queue();
      const url = new URL(AMQP_URL);
      // The first connection's Channel.Open (a method frame on channel 1: class 20, method 10) is the fault
      // point: "reset" answers it with a TCP reset, "silent" swallows it and the proxy goes quiet.
      const channelOpen = Buffer.from([0x00, 0x14, 0x00, 0x0a]);
      let faulted = 0;
      const proxy = net.createServer((client) => {
        const upstream = net.connect(Number(url.port || 5672), url.hostname);
        const faulty = faulted === 0;
        client.on('error', () => undefined);
        upstream.on('error', () => undefined);
        upstream.pipe(client);
        client.on('data', (chunk: Buffer) => {
          if (faulty && faulted === 0 && chunk[0] === 1 && chunk.indexOf(channelOpen) === 7) {
            faulted++;
            upstream.destroy();
            if (fault === 'reset') client.resetAndDestroy();
            return;
          }
          if (!upstream.destroyed) upstream.write(chunk);
        });
        client.on('close', () => upstream.destroy());
      });
      proxy.listen(0, '127.0.0.1');
      await once(proxy, 'listening');
      const address = proxy.address();
      if (address === null || typeof address === 'string') throw new Error('no address');
      const proxied = new URL(AMQP_URL);
      proxied.hostname = '127.0.0.1';
      proxied.port = String(address.port);
      const publisher = createAmqpPublisher({ url: proxied.toString(), connectTimeoutMs: 500 });
      const message = { id: uniqueName('m'), topic: q, key: 'k', payload: new Uint8Array([1]), headers: {}, createdAt: Date.now(), attempt: 1 };
      try {
        // Before the fix, "reset" raised an unhandled ECONNRESET and both faults left this publish, and
        // every later one, waiting forever on a channel that would never open.
        await expect(publisher.publish(message, new AbortController().signal)).rejects.toBeInstanceOf(PublishError);
        expect(faulted).toBe(1);
        await publisher.publish(message, new AbortController().signal);
        expect((await drainQueue(q)).map((m) => m.properties.messageId as string)).toEqual([message.id]);
      } finally {
        await publisher.close();
        proxy.close();
      }
    },
  );

  it('loses nothing when the broker connection is cut and comes back', async () => {
    const q = await queue();
    const url = new URL(AMQP_URL);
    const proxy = new TcpProxy(url.hostname, Number(url.port || 5672));
    await proxy.start();
    const proxied = new URL(AMQP_URL);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(proxy.port);
    // A connect that hangs (the handshake never answered) must not outlast the test's wait.
    const publisher = createAmqpPublisher({ url: proxied.toString(), connectTimeoutMs: 2_000 });
    const { before, during } = await runThroughOutage(publisher, proxy, q, 5);
    const delivered = new Set((await drainQueue(q)).map((m) => m.properties.messageId as string));
    for (const id of [...before, ...during]) expect(delivered.has(id)).toBe(true);
    expect((await outbox.status(db.pool)).deadLetters).toBe(0);
  });
});

describe.runIf(postgres && nats)('outbox relay to NATS JetStream', () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const stream = uniqueName('rs_outbox_js');

  beforeAll(async () => {
    nc = await connect({ servers: NATS_URL });
    jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: StorageType.Memory, duplicate_window: 120_000_000_000 });
  });
  afterAll(async () => {
    await jsm.streams.delete(stream);
    await nc.close();
  });

  /** Every message stored on `subject`, in stream order. */
  async function stored(subject: string): Promise<{ id: string | undefined; key: string | undefined; body: string }[]> {
    const info = await jsm.streams.info(stream);
    const out: { id: string | undefined; key: string | undefined; body: string }[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const message = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
      if (message === undefined || message.subject !== subject) continue;
      out.push({ id: message.header.get('Nats-Msg-Id'), key: message.header.get(NATS_KEY_HEADER), body: new TextDecoder().decode(message.data) });
    }
    return out;
  }

  it('publishes with Nats-Msg-Id = outbox id, each key in order; a republished id is a duplicate the stream drops', async () => {
    const subject = `${stream}.orders`;
    const publisher = createNatsPublisher({ servers: NATS_URL });
    const relay = createRelay({ pool: db.pool, outbox, publisher, pollIntervalMs: 50, perKeyLimit: 5 });
    relays.push(relay);
    relay.start();
    const ids = await enqueueMany(subject, 6, 15);
    await waitUntil(async () => (await pending()) === 0, 15_000, () => outboxBacklog(db.pool, db.schema));
    await relay.stop();
    const first = ids[0] ?? '';
    await publisher.publish(
      { id: first, topic: subject, key: 'key-0', payload: new Uint8Array([1]), headers: {}, attempt: 2, createdAt: 0 },
      new AbortController().signal,
    );
    await publisher.close();
    const messages = await stored(subject);
    expect(messages.map((m) => m.id).sort()).toEqual([...ids].sort());
    const perKey = new Map<string, number[]>();
    for (const m of messages) {
      const { k, n } = JSON.parse(m.body) as { k: number; n: number };
      expect(m.key).toBe(`key-${k}`);
      perKey.set(`key-${k}`, [...(perKey.get(`key-${k}`) ?? []), n]);
    }
    for (const sequence of perKey.values()) expect(sequence).toEqual(Array.from({ length: 15 }, (_, n) => n));
  });

  it('loses nothing, and stores nothing twice, when the connection is cut and comes back', async () => {
    const subject = `${stream}.outage`;
    const url = new URL(NATS_URL);
    const proxy = new TcpProxy(url.hostname, Number(url.port || 4222));
    await proxy.start();
    const publisher = createNatsPublisher({
      servers: `nats://127.0.0.1:${proxy.port}`,
      connectionOptions: { reconnectTimeWait: 50, ignoreClusterUpdates: true },
      ackTimeoutMs: 500,
    });
    const { before, during } = await runThroughOutage(publisher, proxy, subject, 4);
    const ids = (await stored(subject)).map((m) => m.id);
    expect(ids.length).toBe(before.length + during.length);
    expect(new Set(ids)).toEqual(new Set([...before, ...during]));
  });
});
