/**
 * Entry point of the orders scenario's relay process: `createRelay` on the run's outbox, publishing to the
 * run's RabbitMQ exchange (`createAmqpPublisher`) or Kafka topic (`createKafkaPublisher`). Its publisher is
 * wrapped to inject the relay's faults: every `duplicateEvery`-th message is sent twice with the same id
 * (what a broker's duplicate delivery looks like to the consumer), and the configured crash stops after the
 * broker's confirm (RabbitMQ) or acknowledgement (Kafka, `acks=all`), before the relay can mark the row
 * sent, until the parent's SIGKILL. The next relay republishes that row with the same id once the lease
 * expires.
 *
 * @module
 */
import pg from 'pg';
import { createOutbox, createRelay, type OutboxPublisher } from '../../messaging/outbox/index.js';
import { workerTransport } from './broker.js';
import { awaitKill, onShutdown, tellParent, type WorkerConfig } from './protocol.js';

/** The relay's lease, in milliseconds: how long a killed relay's claimed rows wait before a new relay takes them. */
const RELAY_LEASE_MS = 2_500;

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const pool = new pg.Pool({ connectionString: config.store, max: 4 });
const broker = (await workerTransport(config.broker)).publisher();
let published = 0;
const publisher: OutboxPublisher = {
  async publish(message, signal) {
    const n = ++published;
    tellParent({ type: 'count', counter: 'publishes' });
    await broker.publish(message, signal);
    if (config.duplicateEvery > 0 && n % config.duplicateEvery === 0) {
      tellParent({ type: 'count', counter: 'publishes' });
      tellParent({ type: 'count', counter: 'duplicate-copies' });
      await broker.publish(message, signal);
    }
    if (config.crash?.kind === 'relay-after-confirm' && config.crash.at === n) {
      tellParent({ type: 'crash', kind: 'relay-after-confirm' });
      await awaitKill();
    }
  },
  close: () => broker.close(),
};
const relay = createRelay({
  pool,
  outbox: createOutbox({ schema: config.schema }),
  publisher,
  leaseMs: RELAY_LEASE_MS,
  publishTimeoutMs: 2_000,
  pollIntervalMs: 200,
  backoffBaseMs: 100,
  backoffMaxMs: 1_000,
});
relay.start();
onShutdown(async () => {
  await relay.stop();
  await publisher.close();
  await pool.end();
});
tellParent({ type: 'ready' });
