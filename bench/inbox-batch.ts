/**
 * Inbox throughput on PostgreSQL: `inbox.handleBatch` at batch size 50 against `inbox.handle` (one
 * transaction per message), in the same run, alternating, over several rounds. Each message does one
 * business INSERT. Reports messages/s (median and range over rounds) and WAL syncs (`pg_stat_wal.wal_sync`,
 * cluster-wide: other sessions' commits add to it) and WAL bytes per message.
 *
 * Run: `node --import tsx bench/inbox-batch.ts`. Environment: BENCH_INBOX_BATCH_MESSAGES (per round and
 * mode, default 2000), BENCH_INBOX_BATCH_SIZE (50), BENCH_INBOX_BATCH_ROUNDS (3), RETRYSAFE_POSTGRES_URL.
 * The schema it creates (`bench_ib_<run>`) is dropped at the end.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { createInbox, createPostgresInboxStore, type Delivery } from '../src/messaging/inbox/index.js';
import { migrate } from '../src/postgres.js';
import { effectInsert, envCount } from './messaging/context.js';

interface Sample {
  readonly perSecond: number;
  readonly syncsPerMessage: number;
  readonly walBytesPerMessage: number;
}

const messages = envCount('BENCH_INBOX_BATCH_MESSAGES', 2_000);
const batchSize = envCount('BENCH_INBOX_BATCH_SIZE', 50);
const rounds = envCount('BENCH_INBOX_BATCH_ROUNDS', 3);
const schema = `bench_ib_${randomBytes(4).toString('hex')}`;
const pool = new pg.Pool({ connectionString: process.env['RETRYSAFE_POSTGRES_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test', max: 4 });

async function wal(): Promise<{ syncs: number; bytes: number }> {
  const result = await pool.query<{ syncs: string; bytes: string }>('SELECT wal_sync::text AS syncs, wal_bytes::text AS bytes FROM pg_stat_wal');
  return { syncs: Number(result.rows[0]?.syncs), bytes: Number(result.rows[0]?.bytes) };
}

async function measure(run: (deliveries: Delivery[]) => Promise<void>): Promise<Sample> {
  const deliveries = Array.from({ length: messages }, () => ({ consumer: 'bench', messageId: randomUUID() }));
  const before = await wal();
  const started = performance.now();
  await run(deliveries);
  const seconds = (performance.now() - started) / 1000;
  const after = await wal();
  return { perSecond: messages / seconds, syncsPerMessage: (after.syncs - before.syncs) / messages, walBytesPerMessage: (after.bytes - before.bytes) / messages };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

function row(label: string, samples: readonly Sample[]): string {
  const rates = samples.map((s) => s.perSecond);
  const f = (n: number): string => Math.round(n).toString();
  return `| ${label} | ${f(median(rates))} | ${f(Math.min(...rates))}–${f(Math.max(...rates))} | ${median(samples.map((s) => s.syncsPerMessage)).toFixed(3)} | ${f(median(samples.map((s) => s.walBytesPerMessage)))} |`;
}

try {
  await migrate({ pool, schema });
  await pool.query(`CREATE TABLE "${schema}".bench_effects (id bigserial PRIMARY KEY, message_id text NOT NULL, body text NOT NULL)`);
  const insert = effectInsert(schema);
  const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema }) });
  const single: Sample[] = [];
  const batched: Sample[] = [];
  for (let round = 0; round < rounds; round += 1) {
    single.push(
      await measure(async (deliveries) => {
        for (const delivery of deliveries) await inbox.handle(delivery, async (tx) => void (await tx.query(insert, [delivery.messageId, 'x'])));
      }),
    );
    batched.push(
      await measure(async (deliveries) => {
        for (let i = 0; i < deliveries.length; i += batchSize) {
          const outcomes = await inbox.handleBatch(deliveries.slice(i, i + batchSize), async (tx, d) => void (await tx.query(insert, [d.messageId, 'x'])));
          if (outcomes.some((o) => o.status !== 'processed')) throw new Error('bench: a batched message was not processed');
        }
      }),
    );
    process.stderr.write(`round ${round + 1}/${rounds}: ${Math.round(single.at(-1)?.perSecond ?? 0)} vs ${Math.round(batched.at(-1)?.perSecond ?? 0)} msg/s\n`);
  }
  const ratios = single.map((s, i) => (batched[i]?.perSecond ?? 0) / s.perSecond);
  const lines = [
    `${messages} messages per round and mode, ${rounds} rounds, one connection at a time, one business INSERT per message.`,
    '',
    '| mode | msg/s (median) | msg/s (range) | WAL syncs / message (median) | WAL bytes / message (median) |',
    '|---|---:|---:|---:|---:|',
    row('`inbox.handle`, one transaction per message', single),
    row(`\`inbox.handleBatch\`, batch size ${batchSize}`, batched),
    '',
    `Batch / single, per round: median ${median(ratios).toFixed(2)}×, range ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}×.`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
