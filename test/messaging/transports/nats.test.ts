/**
 * The NATS JetStream adapter with the PostgreSQL inbox, against the real servers: duplicate deliveries,
 * a consumer SIGKILLed after commit before ack and mid-handler, a poison message, two competing consumers
 * on one durable, and messages without an id.
 */
import { randomUUID } from 'node:crypto';
import { AckPolicy, connect, headers, nanos, StorageType, type JetStreamClient, type JetStreamManager, type JsMsg, type NatsConnection } from 'nats';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsConsumer, type NatsConsumer } from '../../../src/messaging/transports/nats.js';
import { createInbox, createPostgresInboxStore, inboxProcessor, type Inbox, type MessageHandler } from '../../../src/messaging/inbox/index.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { NATS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { expectRedeliveryProcessed, expectRedeliverySkipped } from './child.js';
import { count, record, type Recorder } from './recorder.js';
import { createEffectsSchema, writeEffect, type EffectsSchema } from '../../support/messaging.js';

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('NATS JetStream', async () => {
    const nc = await connect({ servers: NATS_URL, timeout: 2_000 });
    await (await nc.jetstreamManager()).getAccountInfo();
    await nc.close();
  }));

/** JetStream redelivers an unacked message after this long; the crash tests wait for it. */
const ACK_WAIT_MS = 1_500;

describe.runIf(available)('NATS JetStream consumer with the inbox', () => {
  let db: EffectsSchema;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let js: JetStreamClient;
  const stream = uniqueName('rs_nats');
  let durables = 0;
  const consumers: NatsConsumer[] = [];

  /** A durable pull consumer filtered to its own subject, so each test sees only its own messages. */
  async function durable(): Promise<{ name: string; subject: string }> {
    durables += 1;
    const name = `d${durables}`;
    const subject = `${stream}.${name}`;
    await jsm.consumers.add(stream, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ACK_WAIT_MS), filter_subject: subject });
    return { name, subject };
  }

  async function publish(subject: string, id: string | undefined, body = 'ok'): Promise<void> {
    await js.publish(subject, new TextEncoder().encode(body), id === undefined ? {} : { msgID: id });
  }

  async function consume(
    name: string,
    inbox: Inbox<pg.PoolClient>,
    handler: MessageHandler<pg.PoolClient>,
    extra: { messageId?: (m: JsMsg) => string | undefined; consumerName?: string } = {},
  ): Promise<Recorder> {
    const recorder = record(inboxProcessor(inbox, extra.consumerName ?? 'billing', handler));
    consumers.push(
      await startNatsConsumer({
        jetstream: js,
        stream,
        consumer: name,
        process: recorder.process,
        maxMessages: 8,
        retryDelayMs: 20,
        redriveIntervalMs: false,
        ...(extra.messageId === undefined ? {} : { messageId: extra.messageId }),
      }),
    );
    return recorder;
  }

  function newInbox(maxAttempts = 5): Inbox<pg.PoolClient> {
    return createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts, handlerTimeoutMs: 1_000 });
  }

  beforeAll(async () => {
    db = await createEffectsSchema('rs_inbox_nats', 12);
    nc = await connect({ servers: NATS_URL });
    jsm = await nc.jetstreamManager();
    js = nc.jetstream();
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: StorageType.Memory });
  });

  afterAll(async () => {
    await Promise.all(consumers.map((c) => c.stop()));
    await jsm.streams.delete(stream);
    await nc.close();
    await db.drop();
  });

  it('runs the handler once for five deliveries of one id (taken from a custom header by an extractor)', async () => {
    const { name, subject } = await durable();
    const id = randomUUID();
    for (let i = 0; i < 5; i += 1) {
      // Distinct Nats-Msg-Id values get past the stream's own publish dedup; the event id repeats.
      const h = headers();
      h.set('X-Event-Id', id);
      await js.publish(subject, new TextEncoder().encode('x'), { headers: h, msgID: randomUUID() });
    }
    const runs = new Map<string, number>();
    const recorder = await consume(name, newInbox(), writeEffect(db, runs), { messageId: (m) => m.headers?.get('X-Event-Id') });
    await recorder.until((seen) => count(seen, id, 'ack') === 5);
    expect(runs.get(id)).toBe(1);
    expect(await db.count('billing', id)).toBe(1);
  });

  it('skips the redelivery after a consumer is SIGKILLed between commit and ack (effect count 1)', async () => {
    const { name, subject } = await durable();
    const id = randomUUID();
    await publish(subject, id);
    await expectRedeliverySkipped({ db, id, env: { BROKER: 'nats', STREAM: stream, DURABLE: name }, consume: (handler) => consume(name, newInbox(), handler) });
  });

  it('persists nothing when a consumer is SIGKILLed mid-handler, and processes the redelivery', async () => {
    const { name, subject } = await durable();
    const id = randomUUID();
    await publish(subject, id);
    await expectRedeliveryProcessed({ db, id, env: { BROKER: 'nats', STREAM: stream, DURABLE: name }, consume: (handler) => consume(name, newInbox(), handler) });
  });

  it('dead-letters (terms) a poison message after maxAttempts without blocking the others', async () => {
    const { name, subject } = await durable();
    const poison = randomUUID();
    const good = Array.from({ length: 6 }, () => randomUUID());
    await publish(subject, poison, 'poison');
    for (const id of good) await publish(subject, id);
    const inbox = newInbox(3);
    const recorder = await consume(name, inbox, async (message, tx) => {
      if (new TextDecoder().decode(message.body) === 'poison') throw new Error('cannot parse');
      await db.write(tx, 'billing', message.id ?? '');
    });
    await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1 && good.every((id) => count(seen, id, 'ack') === 1));
    expect(count(recorder.seen, poison, 'retry')).toBe(2);
    for (const id of good) expect(await db.count('billing', id)).toBe(1);
    const letters = await inbox.deadLetters({ consumer: 'billing' });
    expect(letters.map((l) => [l.messageId, l.attempts, l.headers['Nats-Msg-Id']])).toEqual([[poison, 3, poison]]);
    // Every message settled with the server: none left pending or awaiting an ack.
    let info = await jsm.consumers.info(stream, name);
    for (let i = 0; i < 40 && info.num_ack_pending + info.num_pending > 0; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      info = await jsm.consumers.info(stream, name);
    }
    expect([info.num_ack_pending, info.num_pending]).toEqual([0, 0]);
  });

  it('commits each message once with two consumer instances on one durable, 20 ids redelivered by nak', async () => {
    const { name, subject } = await durable();
    const ids = Array.from({ length: 20 }, () => randomUUID());
    for (const id of ids) await publish(subject, id);
    const runs = new Map<string, number>();
    // Each instance fails every message's first attempt, so each id is delivered at least twice, to either.
    const failedOnce = new Set<string>();
    const handler: MessageHandler<pg.PoolClient> = async (message, tx) => {
      if (!failedOnce.has(message.id ?? '')) {
        failedOnce.add(message.id ?? '');
        throw new Error('first attempt fails');
      }
      await writeEffect(db, runs, 'competing')(message, tx, { attempt: 2, signal: new AbortController().signal });
    };
    const first = await consume(name, newInbox(), handler, { consumerName: 'competing' });
    const second = await consume(name, newInbox(), handler, { consumerName: 'competing' });
    const acked = (id: string): number => count(first.seen, id, 'ack') + count(second.seen, id, 'ack');
    await first.until(() => ids.every((id) => acked(id) === 1));
    expect(first.seen.length).toBeGreaterThan(0);
    expect(second.seen.length).toBeGreaterThan(0);
    for (const id of ids) {
      expect(runs.get(id)).toBe(1);
      expect(await db.count('competing', id)).toBe(1);
    }
  });

  it('terms a message without an id without running the handler', async () => {
    const { name, subject } = await durable();
    await publish(subject, undefined, 'no id');
    const runs = new Map<string, number>();
    const recorder = await consume(name, newInbox(), writeEffect(db, runs));
    await recorder.until((seen) => seen.length === 1);
    expect(recorder.seen).toEqual([{ id: undefined, disposition: 'reject' }]);
    expect(runs.size).toBe(0);
    const info = await jsm.consumers.info(stream, name);
    expect(info.num_redelivered).toBe(0);
    await expect(startNatsConsumer({ jetstream: js, stream, consumer: name, process: recorder.process, retryDelayMs: -1 })).rejects.toThrow(/"retryDelayMs"/);
  });
});
