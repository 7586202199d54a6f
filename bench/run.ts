/**
 * `npm run bench`: everything in ONE run on this machine, reported as ratios against baselines measured
 * in the same run — never as absolute targets.
 *
 * - requests/s of a bare handler vs the same handler behind retrysafe (memory, SQLite) on Fastify and
 *   Express, for new keys and replays (target: memory >= 0.90 of bare);
 * - the floors: raw `pg` and raw `ioredis` round trips/s, and the bare handler plus the same number of raw
 *   round trips a retrysafe request costs on that store (target: >= 0.80 of that); for PostgreSQL new keys
 *   the floor is two durable writes (INSERT, UPDATE), since a claim and a completion each commit; for
 *   transactional new keys it is an autocommitted INSERT, then BEGIN, UPDATE, COMMIT (4 round trips, 2
 *   durable commits, like the claim committed apart and the business transaction);
 * - retrysafe on PostgreSQL (plain and transactional) and Redis for new keys, replays and bursts of 8
 *   concurrent duplicates per key (the handler must run exactly once per key);
 * - what metrics cost: the memory store with the OpenTelemetry metrics SDK installed (`memory-otel`) vs
 *   without (`memory`), as the ratio of their requests/s and of their server CPU per request;
 * - bytes per stored record on PostgreSQL;
 * - client sessions (`sessions.ts`): session receiver overhead per request vs a bare call, and the saved-
 *   response count after the run (bounded by the requests in flight);
 * - messaging (`messaging.ts`, printed after the HTTP table; BENCH_MESSAGING=0 skips it): inbox consumer
 *   msg/s with vs without the inbox on RabbitMQ and NATS, outbox relay msg/s vs the raw broker publish
 *   rate, and idle enqueue-to-publish latency.
 *
 * Server and load generator run in separate processes; each row also gives the server process's CPU time
 * per request it served (user + system, microseconds), which does not depend on how the two processes
 * share the cores. Environment: BENCH_DURATION_MS (measured window
 * per scenario, default 3000), BENCH_CONNECTIONS (16), BENCH_ONLY (comma-separated `framework/config` to
 * run a subset, e.g. `fastify/bare,fastify/memory`), BENCH_REPEAT (rounds of the HTTP plan, default 1; with
 * more, each row is the median and its notes give the range), RETRYSAFE_POSTGRES_URL, RETRYSAFE_REDIS_URL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { migrate } from '../src/postgres.js';
import { runBursts, runFloor, runLoad } from './load.js';
import { runMessagingBench } from './messaging.js';
import { runSessionsBench } from './sessions.js';

const durationMs = Number(process.env['BENCH_DURATION_MS'] ?? 3000);
const connections = Number(process.env['BENCH_CONNECTIONS'] ?? 16);
const repeat = Number(process.env['BENCH_REPEAT'] ?? 1);
const postgresUrl = process.env['RETRYSAFE_POSTGRES_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env['RETRYSAFE_REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const warmupMs = 500;
const body = JSON.stringify({ amount: 1250, currency: 'EUR', customer: 'cus_42' });
// `npm run bench` compiles src/ and bench/ with tsc first: the servers run the JavaScript users run.
const serverScript = fileURLToPath(new URL('./server.js', import.meta.url));
const runId = randomBytes(4).toString('hex');
const schema = `bench_${runId}`;
const redisPrefix = `bench_${runId}`;

interface Row {
  readonly framework: string;
  readonly config: string;
  readonly scenario: string;
  readonly perSecond: number;
  /** The config whose "no key" rate this row is compared with. */
  readonly baseline: string;
  readonly note: string;
  readonly rssMb: number;
  /** The server process's CPU time (user + system) per request it served in the scenario, in microseconds. */
  readonly cpuMicrosPerRequest: number;
}

async function startServer(framework: string, config: string): Promise<{ child: ChildProcess; origin: string }> {
  const child = spawn(process.execPath, [serverScript, framework, config], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env,
      BENCH_POSTGRES_URL: postgresUrl,
      BENCH_POSTGRES_SCHEMA: schema,
      BENCH_REDIS_URL: redisUrl,
      BENCH_REDIS_PREFIX: redisPrefix,
    },
  });
  const lines = createInterface({ input: child.stdout });
  for await (const line of lines) {
    const { port } = JSON.parse(line) as { port: number };
    return { child, origin: `http://127.0.0.1:${port}` };
  }
  throw new Error(`bench server ${framework}/${config} exited before listening`);
}

interface ServerStats {
  readonly rssMb: number;
  readonly executions: number;
  readonly requests: number;
  readonly cpuMicros: number;
}

async function serverStats(origin: string): Promise<ServerStats> {
  const res = await fetch(`${origin}/__stats`);
  const { rss, executions, requests, cpuMicros } = (await res.json()) as { rss: number; executions: number; requests: number; cpuMicros: number };
  return { rssMb: Math.round((rss / 1024 / 1024) * 10) / 10, executions, requests, cpuMicros };
}

async function stopServer(child: ChildProcess): Promise<void> {
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

function statusText(statuses: Readonly<Record<number, number>>): string {
  return Object.entries(statuses)
    .map(([status, count]) => `${status}×${count}`)
    .join(' ');
}

/** Which baseline each retrysafe scenario is compared with: bare plus the raw round trips it costs. */
const BASELINES: Readonly<Record<string, { readonly new: string; readonly replay: string }>> = {
  memory: { new: 'bare', replay: 'bare' },
  'memory-otel': { new: 'bare', replay: 'bare' },
  sqlite: { new: 'bare', replay: 'bare' },
  // claim + complete: two durable writes; a replay is the claim alone, a read
  postgres: { new: 'raw-pgw-2', replay: 'raw-pg-1' },
  // claim (committed on its own), BEGIN, complete, COMMIT: 4 round trips, 2 durable commits; a replay is
  // the claim alone, a read (no transaction is opened)
  'postgres-tx': { new: 'raw-pgtx-4', replay: 'raw-pg-1' },
  redis: { new: 'raw-redis-2', replay: 'raw-redis-1' },
  // the same stores with the receiver's replay cache on: their own rows, read apart from the targets
  'sqlite-replay-cache': { new: 'bare', replay: 'bare' },
  'postgres-replay-cache': { new: 'raw-pgw-2', replay: 'raw-pg-1' },
  'redis-replay-cache': { new: 'raw-redis-2', replay: 'raw-redis-1' },
};

async function measure(framework: string, config: string, bursts: boolean, round: number): Promise<Row[]> {
  const { child, origin } = await startServer(framework, config);
  const rows: Row[] = [];
  // Server CPU is counted from the end of the previous row (warm-up included; the stats requests add two).
  let since = await serverStats(origin);
  const load = (keyFor: (n: number) => string | undefined) =>
    runLoad({ origin, path: '/payments', connections, warmupMs, durationMs, keyFor, body });
  const row = async (scenario: string, perSecond: number, baseline: string, note: string): Promise<void> => {
    const now = await serverStats(origin);
    const cpuMicrosPerRequest = (now.cpuMicros - since.cpuMicros) / Math.max(1, now.requests - since.requests);
    rows.push({ framework, config, scenario, perSecond, baseline, note, rssMb: now.rssMb, cpuMicrosPerRequest });
    since = now;
  };
  try {
    const baselines = BASELINES[config];
    if (!baselines) {
      const result = await load(() => undefined);
      await row('no key', result.perSecond, config, statusText(result.statuses));
      return rows;
    }
    // Keys carry the config: PostgreSQL and Redis configs share one schema / prefix per run.
    const tag = `${runId}-${round}-${framework}-${config}`;
    const newKeys = await load((n) => `new-${tag}-${n}`);
    await row('new keys', newKeys.perSecond, baselines.new, statusText(newKeys.statuses));
    const replayKeys = 64;
    for (let i = 0; i < replayKeys; i++) {
      await fetch(`${origin}/payments`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `replay-${tag}-${i}` },
        body,
      }).then((r) => r.arrayBuffer());
    }
    since = await serverStats(origin);
    const replays = await load((n) => `replay-${tag}-${n % replayKeys}`);
    await row('replays', replays.perSecond, baselines.replay, statusText(replays.statuses));
    if (bursts) {
      const before = (await serverStats(origin)).executions;
      const burst = await runBursts({
        origin,
        path: '/payments',
        parallel: Math.max(1, Math.floor(connections / 8)),
        burst: 8,
        durationMs,
        keyFor: (n) => `burst-${tag}-${n}`,
        body,
      });
      const executions = (await serverStats(origin)).executions - before;
      const verdict = executions === burst.keys ? 'OK' : 'DOUBLE EXECUTION';
      await row(
        'bursts of 8 duplicates',
        burst.perSecond,
        baselines.replay,
        `${burst.keys} keys, ${executions} executions (${verdict}); ${statusText(burst.statuses)}`,
      );
      if (executions !== burst.keys) process.exitCode = 1;
    }
  } finally {
    await stopServer(child);
  }
  return rows;
}

/**
 * One row per scenario: the median of the rounds' requests/s, CPU per request and RSS (each taken on its
 * own), and with more than one round the requests/s range in the notes. Every round's burst notes are
 * kept apart only when they differ (a double execution in any round shows).
 */
function medianRows(rounds: readonly (readonly Row[])[]): Row[] {
  const first = rounds[0] ?? [];
  if (rounds.length === 1) return [...first];
  return first.map((row, i) => {
    const same = rounds.map((round) => round[i]).filter((r): r is Row => r !== undefined);
    const rates = same.map((r) => r.perSecond);
    // Burst verdicts per round (a double execution in any round shows), then every status code seen.
    const verdicts = [...new Set(same.flatMap((r) => /\((OK|DOUBLE EXECUTION)\)/.exec(r.note)?.[1] ?? []))];
    const codes = [...new Set(same.flatMap((r) => [...r.note.matchAll(/(\d{3})×/g)].map((m) => m[1])))].sort();
    const burst = verdicts.length > 0 ? `executions = keys in every round: ${verdicts.join(' / ')}; ` : '';
    return {
      ...row,
      perSecond: median(rates),
      cpuMicrosPerRequest: median(same.map((r) => r.cpuMicrosPerRequest)),
      rssMb: Math.round(median(same.map((r) => r.rssMb)) * 10) / 10,
      note: `${Math.round(Math.min(...rates))}–${Math.round(Math.max(...rates))} req/s; ${burst}statuses ${codes.join(', ')}`,
    };
  });
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? Number.NaN) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
}

/** The metrics' cost: `memory-otel` against `memory`, per framework and scenario, from the same rows. */
function metricsCost(rows: readonly Row[]): string {
  const lines: string[] = [];
  for (const withSdk of rows.filter((r) => r.config === 'memory-otel')) {
    const without = rows.find((r) => r.framework === withSdk.framework && r.config === 'memory' && r.scenario === withSdk.scenario);
    if (!without) continue;
    const cpu = ((withSdk.cpuMicrosPerRequest - without.cpuMicrosPerRequest) / without.cpuMicrosPerRequest) * 100;
    lines.push(
      `metrics SDK installed vs not, ${withSdk.framework} memory ${withSdk.scenario}: ${(withSdk.perSecond / without.perSecond).toFixed(3)}× the requests/s, CPU per request ${cpu >= 0 ? '+' : ''}${cpu.toFixed(1)} %`,
    );
  }
  return lines.join('\n');
}

function table(rows: readonly Row[]): string {
  const rate = new Map(rows.filter((r) => r.scenario === 'no key').map((r) => [`${r.framework}/${r.config}`, r.perSecond]));
  const lines = [
    '| framework | config | scenario | req/s | baseline | ratio | server CPU (µs/req) | server RSS (MB) | statuses / notes |',
    '|---|---|---|---:|---|---:|---:|---:|---|',
  ];
  for (const r of rows) {
    const base = rate.get(`${r.framework}/${r.baseline}`) ?? Number.NaN;
    lines.push(
      `| ${r.framework} | ${r.config} | ${r.scenario} | ${Math.round(r.perSecond)} | ${r.baseline} | ${(r.perSecond / base).toFixed(2)} | ${r.cpuMicrosPerRequest.toFixed(1)} | ${r.rssMb} | ${r.note} |`,
    );
  }
  return lines.join('\n');
}

async function floors(): Promise<string> {
  const pool = new pg.Pool({ connectionString: postgresUrl, max: connections });
  const redis = new Redis(redisUrl);
  try {
    const pgRate = await runFloor(() => pool.query('SELECT 1'), connections, durationMs);
    const redisRate = await runFloor(() => redis.ping(), connections, durationMs);
    return `raw round trips/s with ${connections} concurrent callers: pg \`SELECT 1\` ${Math.round(pgRate)}, ioredis PING ${Math.round(redisRate)}`;
  } finally {
    await pool.end();
    await redis.quit();
  }
}

async function recordBytes(): Promise<string> {
  const pool = new pg.Pool({ connectionString: postgresUrl, max: 1 });
  try {
    const { rows } = await pool.query<{ n: string; row: string; body: string; headers: string }>(
      `SELECT count(*) AS n, avg(pg_column_size(r.*))::int AS row, avg(octet_length(r.body))::int AS body,
              avg(pg_column_size(r.headers))::int AS headers
         FROM "${schema}".records r WHERE r.completed_at IS NOT NULL`,
    );
    const stats = rows[0];
    if (!stats || Number(stats.n) === 0) return 'PostgreSQL bytes per completed record: no PostgreSQL scenario ran';
    const record = Number(stats.row) - Number(stats.body);
    return `PostgreSQL bytes per completed record (pg_column_size, ${stats.n} rows): ${stats.row} bytes, of which ${stats.body} bytes of response body and ${stats.headers} bytes of saved headers → ${record} bytes of record with its headers, ${record - Number(stats.headers)} without`;
  } finally {
    await pool.end();
  }
}

async function cleanup(): Promise<void> {
  const pool = new pg.Pool({ connectionString: postgresUrl, max: 1 });
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
  const redis = new Redis(redisUrl);
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${redisPrefix}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== '0');
  await redis.quit();
}

const plan: readonly (readonly [framework: string, config: string, bursts: boolean])[] = [
  ['fastify', 'bare', false],
  ['fastify', 'memory', true],
  ['fastify', 'memory-otel', false],
  ['fastify', 'sqlite', false],
  ['fastify', 'sqlite-replay-cache', false],
  ['express', 'bare', false],
  ['express', 'memory', true],
  ['express', 'memory-otel', false],
  ['express', 'sqlite', false],
  ['fastify', 'raw-pg-1', false],
  ['fastify', 'raw-pgw-2', false],
  ['fastify', 'raw-pgtx-4', false],
  ['fastify', 'postgres', true],
  ['fastify', 'postgres-tx', true],
  ['fastify', 'postgres-replay-cache', false],
  ['fastify', 'raw-redis-1', false],
  ['fastify', 'raw-redis-2', false],
  ['fastify', 'redis', true],
  ['fastify', 'redis-replay-cache', false],
];

await migrate({ connectionString: postgresUrl, schema });
{
  const pool = new pg.Pool({ connectionString: postgresUrl, max: 1 });
  await pool.query(`CREATE TABLE "${schema}".bench_floor (k text PRIMARY KEY, v int NOT NULL)`);
  await pool.end();
}
const rounds: Row[][] = [];
let floorLine = '';
let bytesLine = '';
try {
  floorLine = await floors();
  const only = process.env['BENCH_ONLY']?.split(',');
  for (let round = 0; round < repeat; round++) {
    const rows: Row[] = [];
    for (const [framework, config, bursts] of plan) {
      if (only && !only.includes(`${framework}/${config}`)) continue;
      rows.push(...(await measure(framework, config, bursts, round)));
      process.stderr.write(`measured ${framework}/${config} (round ${round + 1} of ${repeat})\n`);
    }
    rounds.push(rows);
  }
  bytesLine = await recordBytes();
} finally {
  await cleanup();
}
process.stdout.write(
  `\nretrysafe benchmark — ${connections} connections, ${durationMs} ms per scenario, ${repeat === 1 ? 'one round' : `median of ${repeat} rounds`}, node ${process.version}\n\n`,
);
const medians = medianRows(rounds);
process.stdout.write(`${table(medians)}\n\n${metricsCost(medians)}\n\n${floorLine}\n${bytesLine}\n`);
process.stdout.write(`\n${await runSessionsBench()}\n`);
if (process.env['BENCH_MESSAGING'] !== '0') process.stdout.write(`\n${await runMessagingBench()}\n`);
