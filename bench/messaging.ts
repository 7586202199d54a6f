/**
 * The messaging section of `npm run bench`: inbox overhead on RabbitMQ and NATS JetStream, outbox relay
 * throughput and idle latency next to each broker's raw publish rate, and what an enqueue costs the
 * writing transactions, all measured in the same run. Targets
 * (the project's targets): relay >= 5,000 msg/s, idle enqueue-to-publish p50 <= 10 ms.
 *
 * Environment: BENCH_MESSAGING=0 skips it; BENCH_MSG_INBOX (messages per inbox run, default 2000),
 * BENCH_MSG_RELAY (outbox rows per relay run, 5000), BENCH_MSG_KEYS (ordering keys, 1000),
 * BENCH_MSG_LATENCY (latency samples, 100), BENCH_MSG_ENQUEUE_MS (duration of each enqueue-cost row,
 * 3000), RETRYSAFE_POSTGRES_URL, RETRYSAFE_AMQP_URL, RETRYSAFE_NATS_URL.
 * Everything it creates (schema `bench_msg_<run>`, queues `bench.<run>.…`, streams `BENCH_…_<run>`) is
 * removed at the end.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../src/postgres.js';
import { envCount, type BenchContext } from './messaging/context.js';
import { ENQUEUE_WRITERS, enqueueCost, type EnqueueResult } from './messaging/enqueue.js';
import { inboxOnNats, inboxOnRabbit, type InboxResult } from './messaging/inbox.js';
import { RAW_IN_FLIGHT, relayOnNats, relayOnRabbit, type RelayResult } from './messaging/relay.js';

const RELAY_TARGET_PER_SECOND = 5_000;
const P50_TARGET_MS = 10;

function inboxTable(results: readonly InboxResult[]): string {
  const lines = ['| broker | consumer | messages | msg/s | with inbox / without |', '|---|---|---:|---:|---:|'];
  for (const r of results) {
    const without = results.find((other) => other.broker === r.broker && !other.withInbox);
    const ratio = r.withInbox && without ? (r.perSecond / without.perSecond).toFixed(2) : '1.00 (baseline)';
    lines.push(`| ${r.broker} | ${r.withInbox ? 'inboxProcessor (mark + INSERT, one tx)' : 'plain (INSERT in its own tx)'} | ${r.messages} | ${Math.round(r.perSecond)} | ${ratio} |`);
  }
  return lines.join('\n');
}

function relayTable(results: readonly RelayResult[]): string {
  const met = (ok: boolean): string => (ok ? 'met' : '**NOT met**');
  const lines = [
    `| broker | raw publish msg/s (${RAW_IN_FLIGHT} in flight) | relay msg/s (rows sent / total) | relay / raw | relay >= ${RELAY_TARGET_PER_SECOND} msg/s | idle p50 ms | idle p99 ms | p50 <= ${P50_TARGET_MS} ms |`,
    '|---|---:|---:|---:|---|---:|---:|---|',
  ];
  for (const r of results) {
    lines.push(
      `| ${r.broker} | ${Math.round(r.rawPerSecond)} | ${Math.round(r.relayPerSecond)} (${r.sent}/${r.messages}, ${r.keys} keys) | ${(r.relayPerSecond / r.rawPerSecond).toFixed(2)} | ${met(r.relayPerSecond >= RELAY_TARGET_PER_SECOND && r.sent === r.messages)} | ${r.p50Ms.toFixed(1)} | ${r.p99Ms.toFixed(1)} | ${met(r.p50Ms <= P50_TARGET_MS)} (${r.latencySamples} samples) |`,
    );
  }
  return lines.join('\n');
}

function enqueueTable(results: readonly EnqueueResult[]): string {
  const baseline = results[0]?.perSecond ?? Number.NaN;
  const lines = ['| writer transaction | transactions/s | ratio to business only |', '|---|---:|---:|'];
  for (const r of results) lines.push(`| ${r.label} | ${Math.round(r.perSecond)} | ${(r.perSecond / baseline).toFixed(2)} |`);
  return lines.join('\n');
}

/** Runs every messaging measurement and resolves with the markdown tables. */
export async function runMessagingBench(): Promise<string> {
  const runId = randomBytes(4).toString('hex');
  const schema = `bench_msg_${runId}`;
  const pool = new pg.Pool({ connectionString: process.env['RETRYSAFE_POSTGRES_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test', max: 16 });
  const ctx: BenchContext = {
    pool,
    schema,
    runId,
    amqpUrl: process.env['RETRYSAFE_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672',
    natsUrl: process.env['RETRYSAFE_NATS_URL'] ?? 'nats://127.0.0.1:4222',
  };
  const inboxCount = envCount('BENCH_MSG_INBOX', 2_000);
  const sizes = { messages: envCount('BENCH_MSG_RELAY', 5_000), keys: envCount('BENCH_MSG_KEYS', 1_000), latencySamples: envCount('BENCH_MSG_LATENCY', 100), gapMs: 20 };
  const started = performance.now();
  try {
    await migrate({ pool, schema });
    await pool.query(`CREATE TABLE "${schema}".bench_effects (id bigserial PRIMARY KEY, message_id text NOT NULL, body text NOT NULL)`);
    const inbox = [...(await inboxOnRabbit(ctx, inboxCount)), ...(await inboxOnNats(ctx, inboxCount))];
    process.stderr.write('measured messaging/inbox\n');
    const relay = [await relayOnRabbit(ctx, sizes), await relayOnNats(ctx, sizes)];
    process.stderr.write('measured messaging/relay\n');
    const enqueueMs = envCount('BENCH_MSG_ENQUEUE_MS', 3_000);
    const enqueue = await enqueueCost(ctx, enqueueMs);
    process.stderr.write('measured messaging/enqueue\n');
    return [
      `### Messaging (${Math.round((performance.now() - started) / 1000)} s)`,
      '',
      `Inbox: messages/s draining a pre-filled queue (RabbitMQ prefetch 64, JetStream max_messages 64; pg pool of 16).`,
      '',
      inboxTable(inbox),
      '',
      `Outbox relay: ${sizes.messages} pre-filled rows over ${sizes.keys} keys, one relay (batchSize 1000) with two runOnce loops; ` +
        `idle latency from COMMIT of one enqueued row to its \`published\` event (relay started, ${sizes.gapMs} ms gaps).`,
      '',
      relayTable(relay),
      '',
      `Enqueue cost to the writers: ${ENQUEUE_WRITERS} clients committing BEGIN, a business INSERT, [enqueue,] COMMIT for ${enqueueMs} ms each row.`,
      '',
      enqueueTable(enqueue),
    ].join('\n');
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  }
}
