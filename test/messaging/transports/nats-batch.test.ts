/**
 * The batched JetStream consumer with the PostgreSQL and SQLite inboxes, against the real server: duplicates
 * inside a batch and across batches, a connection closed after the batch committed and before its acks,
 * one failing message among good ones, and a `max_ack_pending` below the batch size.
 */
import { randomUUID } from 'node:crypto';
import { AckPolicy, connect, headers, nanos, StorageType, type JetStreamClient, type JetStreamManager, type NatsConnection } from 'nats';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BatchProcessor } from '../../../src/messaging/inbox/index.js';
import { startNatsBatchConsumer, type NatsConsumer } from '../../../src/messaging/transports/nats.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { NATS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { openBatchStore, type BatchStore, type BatchStoreKind } from './batch-effects.js';
import { count, recordBatch, type BatchRecorder } from './recorder.js';

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('NATS JetStream', async () => {
    const nc = await connect({ servers: NATS_URL, timeout: 2_000 });
    await (await nc.jetstreamManager()).getAccountInfo();
    await nc.close();
  }));

/** JetStream redelivers an unacked message after this long; the crash test waits for it. */
const ACK_WAIT_MS = 1_500;

describe.runIf(available).each<BatchStoreKind>(['postgres', 'sqlite'])('NATS JetStream batched consumer with the %s inbox', (kind) => {
  let store: BatchStore;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let js: JetStreamClient;
  const stream = uniqueName(`rs_nats_batch_${kind}`);
  let durables = 0;
  const consumers: NatsConsumer[] = [];
  const connections: NatsConnection[] = [];
  const errors: unknown[] = [];

  beforeAll(async () => {
    store = await openBatchStore(kind);
    nc = await connect({ servers: NATS_URL });
    jsm = await nc.jetstreamManager();
    js = nc.jetstream();
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: StorageType.Memory });
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop()));
    await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
  });
  afterAll(async () => {
    await jsm.streams.delete(stream);
    await nc.close();
    await store.close();
  });

  /** A durable pull consumer filtered to its own subject, so each test sees only its own messages. */
  async function durable(maxAckPending = 1_000): Promise<{ name: string; subject: string }> {
    durables += 1;
    const name = `d${durables}`;
    const subject = `${stream}.${name}`;
    await jsm.consumers.add(stream, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ACK_WAIT_MS), filter_subject: subject, max_ack_pending: maxAckPending });
    return { name, subject };
  }

  /** Publishes one copy of event `id`: a fresh `Nats-Msg-Id` gets it past the stream's own dedup, `X-Event-Id` repeats. */
  async function publish(subject: string, id: string): Promise<void> {
    const h = headers();
    h.set('X-Event-Id', id);
    await js.publish(subject, new TextEncoder().encode('ok'), { headers: h, msgID: randomUUID() });
  }

  /** Starts a batched consumer on a connection of its own; `wrap` may wrap the recorded processor. */
  async function consume(name: string, process: BatchProcessor, wrap: (p: BatchProcessor, own: NatsConnection) => BatchProcessor = (p) => p): Promise<BatchRecorder> {
    const recorder = recordBatch(process);
    const own = await connect({ servers: NATS_URL });
    connections.push(own);
    consumers.push(
      await startNatsBatchConsumer({
        jetstream: own.jetstream(),
        stream,
        consumer: name,
        process: wrap(recorder.process, own),
        maxBatchSize: 20,
        maxBatchWaitMs: 200,
        maxMessages: 40,
        retryDelayMs: 20,
        messageId: (m) => m.headers?.get('X-Event-Id'),
        redriveIntervalMs: false,
        onError: (error) => errors.push(error),
      }),
    );
    return recorder;
  }

  it('applies each message once: duplicates inside a batch and across batches are acked without running again', async () => {
    const { name, subject } = await durable();
    const effects = store.tables();
    const ids = Array.from({ length: 10 }, () => randomUUID());
    for (const id of ids) for (let copy = 0; copy < 2; copy++) await publish(subject, id);
    const runs = new Map<string, number>();
    const recorder = await consume(name, effects.processor({ runs }));
    await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 2));
    expect(recorder.batches.some((size) => size > 1)).toBe(true);
    for (const id of ids) await publish(subject, id);
    await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 3));
    for (const id of ids) {
      expect(runs.get(id)).toBe(1);
      expect(await effects.count(id)).toBe(1);
    }
    expect(recorder.seen.every((s) => s.disposition === 'ack')).toBe(true);
  });

  it('answers the messages of a batch whose connection closed after the commit, before the acks, as duplicates', async () => {
    const { name, subject } = await durable();
    const effects = store.tables();
    const ids = Array.from({ length: 6 }, () => randomUUID());
    for (const id of ids) await publish(subject, id);
    const firstRuns = new Map<string, number>();
    let closed = 0;
    const first = await consume(name, effects.processor({ runs: firstRuns }), (process, own) => async (messages) => {
      const dispositions = await process(messages);
      // The batch committed; the connection goes before any ack is sent, as in a crash.
      await own.close();
      closed += messages.length;
      return dispositions;
    });
    await first.until(() => closed === ids.length);
    for (const id of ids) expect(await effects.count(id)).toBe(1);
    const runs = new Map<string, number>();
    const second = await consume(name, effects.processor({ runs }));
    await second.until((seen) => ids.every((id) => count(seen, id) === 1), ACK_WAIT_MS + 10_000);
    expect(second.seen.every((s) => s.disposition === 'ack')).toBe(true);
    expect(runs.size).toBe(0);
    for (const id of ids) {
      expect(firstRuns.get(id)).toBe(1);
      expect(await effects.count(id)).toBe(1);
    }
  });

  it('retries and then dead-letters (terms) only the message whose handler fails; the rest of its batch commits once', async () => {
    const { name, subject } = await durable();
    const effects = store.tables();
    const poison = randomUUID();
    const good = Array.from({ length: 5 }, () => randomUUID());
    for (const id of [good[0] as string, poison, ...good.slice(1)]) await publish(subject, id);
    const runs = new Map<string, number>();
    const recorder = await consume(name, effects.processor({ runs, maxAttempts: 2, fails: (id) => id === poison }));
    await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1 && good.every((id) => count(seen, id, 'ack') === 1));
    expect(count(recorder.seen, poison, 'retry')).toBe(1);
    expect(runs.get(poison)).toBe(2);
    expect(await effects.count(poison)).toBe(0);
    for (const id of good) {
      expect(count(recorder.seen, id)).toBe(1);
      expect(runs.get(id)).toBe(1);
      expect(await effects.count(id)).toBe(1);
    }
    expect(await effects.deadLetters()).toEqual([poison]);
    // Every message settled with the server: none pending, none awaiting an ack.
    let info = await jsm.consumers.info(stream, name);
    for (let i = 0; i < 40 && info.num_ack_pending + info.num_pending > 0; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      info = await jsm.consumers.info(stream, name);
    }
    expect([info.num_ack_pending, info.num_pending]).toEqual([0, 0]);
  });

  it("refuses a batch size above the durable consumer's max_ack_pending, or above maxMessages", async () => {
    const { name } = await durable(10);
    const options = { jetstream: js, stream, consumer: name, process: store.tables().processor(), maxBatchSize: 20, redriveIntervalMs: false } as const;
    await expect(startNatsBatchConsumer(options)).rejects.toThrow(
      new TypeError(
        "retrysafe: startNatsBatchConsumer option \"maxBatchSize\" (20) must not exceed the consumer's max_ack_pending (10): the broker stops delivering at 10 unacknowledged messages, so a batch would never fill",
      ),
    );
    await expect(startNatsBatchConsumer({ ...options, maxMessages: 5 })).rejects.toThrow(/"maxBatchSize" \(20\) must not exceed option "maxMessages" \(5\)/);
  });
});
