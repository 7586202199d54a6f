/**
 * The batched RabbitMQ consumer with the PostgreSQL and SQLite inboxes, against the real server: duplicates
 * inside a batch and across batches, a connection closed after the batch committed and before its acks,
 * one failing message among good ones, and a prefetch below the batch size.
 */
import { randomUUID } from 'node:crypto';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BatchProcessor } from '../../../src/messaging/inbox/index.js';
import { startAmqpBatchConsumer, type AmqpConsumer } from '../../../src/messaging/transports/amqp.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { AMQP_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { openBatchStore, type BatchStore, type BatchStoreKind } from './batch-effects.js';
import { count, recordBatch, type BatchRecorder } from './recorder.js';

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('RabbitMQ', async () => {
    const connection = await amqp.connect(AMQP_URL);
    await connection.close();
  }));

describe.runIf(available).each<BatchStoreKind>(['postgres', 'sqlite'])('RabbitMQ batched consumer with the %s inbox', (kind) => {
  let store: BatchStore;
  let connection: ChannelModel;
  let channel: Channel;
  const base = uniqueName(`rs_amqp_batch_${kind}`);
  const queues: string[] = [];
  const consumers: AmqpConsumer[] = [];
  const connections: ChannelModel[] = [];
  const errors: unknown[] = [];

  beforeAll(async () => {
    store = await openBatchStore(kind);
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop()));
    await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
  });
  afterAll(async () => {
    for (const name of queues) await channel.deleteQueue(name);
    await connection.close();
    await store.close();
  });

  async function queue(): Promise<string> {
    const name = `${base}_${queues.length}`;
    queues.push(name);
    await channel.assertQueue(name, { durable: false });
    return name;
  }

  function publish(q: string, id: string): void {
    channel.sendToQueue(q, Buffer.from('ok'), { messageId: id });
  }

  /** Starts a batched consumer on a connection of its own; `wrap` may wrap the recorded processor. */
  async function consume(q: string, process: BatchProcessor, wrap: (p: BatchProcessor, own: ChannelModel) => BatchProcessor = (p) => p): Promise<BatchRecorder> {
    const recorder = recordBatch(process);
    const own = await amqp.connect(AMQP_URL);
    own.on('error', () => undefined);
    connections.push(own);
    const ownChannel = await own.createChannel();
    ownChannel.on('error', () => undefined);
    consumers.push(
      await startAmqpBatchConsumer({
        channel: ownChannel,
        queue: q,
        process: wrap(recorder.process, own),
        maxBatchSize: 20,
        maxBatchWaitMs: 200,
        prefetch: 40,
        redriveIntervalMs: false,
        onError: (error) => errors.push(error),
      }),
    );
    return recorder;
  }

  it('applies each message once: duplicates inside a batch and across batches are acked without running again', async () => {
    const q = await queue();
    const effects = store.tables();
    const ids = Array.from({ length: 10 }, () => randomUUID());
    for (const id of ids) for (let copy = 0; copy < 2; copy++) publish(q, id);
    const runs = new Map<string, number>();
    const recorder = await consume(q, effects.processor({ runs }));
    await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 2));
    expect(recorder.batches.some((size) => size > 1)).toBe(true);
    // The same ids again: a redelivery across batches.
    for (const id of ids) publish(q, id);
    await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 3));
    for (const id of ids) {
      expect(runs.get(id)).toBe(1);
      expect(await effects.count(id)).toBe(1);
    }
    expect(recorder.seen.every((s) => s.disposition === 'ack')).toBe(true);
  });

  it('answers the deliveries of a batch whose connection closed after the commit, before the acks, as duplicates', async () => {
    const q = await queue();
    const effects = store.tables();
    const ids = Array.from({ length: 6 }, () => randomUUID());
    for (const id of ids) publish(q, id);
    const firstRuns = new Map<string, number>();
    let closed = 0;
    const first = await consume(q, effects.processor({ runs: firstRuns }), (process, own) => async (messages) => {
      const dispositions = await process(messages);
      // The batch committed; the connection goes before any ack is sent, as in a crash.
      await own.close();
      closed += messages.length;
      return dispositions;
    });
    await first.until(() => closed === ids.length);
    for (const id of ids) expect(await effects.count(id)).toBe(1);
    const runs = new Map<string, number>();
    const second = await consume(q, effects.processor({ runs }));
    await second.until((seen) => ids.every((id) => count(seen, id) === 1));
    expect(second.seen.every((s) => s.disposition === 'ack')).toBe(true);
    expect(runs.size).toBe(0);
    for (const id of ids) {
      expect(firstRuns.get(id)).toBe(1);
      expect(await effects.count(id)).toBe(1);
    }
  });

  it('retries and then dead-letters only the message whose handler fails; the rest of its batch commits once', async () => {
    const q = await queue();
    const effects = store.tables();
    const poison = randomUUID();
    const good = Array.from({ length: 5 }, () => randomUUID());
    for (const id of [good[0] as string, poison, ...good.slice(1)]) publish(q, id);
    const runs = new Map<string, number>();
    const recorder = await consume(q, effects.processor({ runs, maxAttempts: 2, fails: (id) => id === poison }));
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
  });

  it('runs a redriven dead letter through the batch processor once', async () => {
    const q = await queue();
    const effects = store.tables();
    const poison = randomUUID();
    let failing = true;
    const runs = new Map<string, number>();
    const process = effects.processor({ runs, maxAttempts: 2, fails: (id) => failing && id === poison });
    publish(q, poison);
    const recorder = await consume(q, process);
    await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1);
    expect(await effects.count(poison)).toBe(0);
    failing = false;
    expect(await effects.redrive(poison)).toBe(true);
    // The consumer's poll calls this every redriveIntervalMs, never two at once.
    expect(await process.redrivePending?.()).toBe(1);
    expect(await process.redrivePending?.()).toBe(0);
    expect(runs.get(poison)).toBe(3);
    expect(await effects.count(poison)).toBe(1);
    expect(await effects.deadLetters()).toEqual([]);
  });

  it('redelivers a batch whose processor answers the wrong number of dispositions, and reports it', async () => {
    const q = await queue();
    const effects = store.tables();
    const ids = Array.from({ length: 3 }, () => randomUUID());
    for (const id of ids) publish(q, id);
    let calls = 0;
    const seenErrors = errors.length;
    const runs = new Map<string, number>();
    const recorder = await consume(q, effects.processor({ runs }), (process) => async (messages) => {
      calls += 1;
      const dispositions = await process(messages);
      return calls === 1 ? dispositions.slice(1) : dispositions;
    });
    // The first answer (applied, but one disposition short) is recorded as acks, and the broker gets nacks:
    // the deliveries come back and are acked as duplicates.
    await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 2));
    const reported = errors.slice(seenErrors).filter((e): e is TypeError => e instanceof TypeError);
    expect(reported.map((e) => e.message)).toEqual([expect.stringMatching(/^retrysafe: the batch processor must answer one disposition per message \(\d+\)/)]);
    for (const id of ids) expect(runs.get(id)).toBe(1);
    for (const id of ids) expect(await effects.count(id)).toBe(1);
  });

  it('refuses a prefetch below the batch size', async () => {
    const q = await queue();
    await expect(
      startAmqpBatchConsumer({ channel, queue: q, process: store.tables().processor(), maxBatchSize: 50, prefetch: 10 }),
    ).rejects.toThrow(new TypeError(
      'retrysafe: startAmqpBatchConsumer option "maxBatchSize" (50) must not exceed option "prefetch" (10): the broker stops delivering at 10 unacknowledged messages, so a batch would never fill',
    ));
  });
});
