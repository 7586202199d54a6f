// Server CPU per request, in one process, with no sockets: N requests through fastify.inject() (or
// receiver.run for `run-*`), `concurrency` in flight, after a warm-up; prints the process's CPU time
// (user + system, microseconds) per request. Compare two builds by alternating runs and taking medians:
//
//   node bench/cpu.mjs <checkout with a built dist/> <scenario> [requests] [concurrency]
//
// scenario: bare | memory-new | memory-replay | run-new | run-replay | sqlite-new | sqlite-replay |
//           redis-new | redis-replay | runredis-new | runredis-replay (receiver.run on the Redis store, no HTTP) |
//           pg-new | pg-replay | pgtx-new | pgtx-replay |
//           pgfloor-new | pgfloor-replay | pgfloor-tx (no retrysafe: the handler runs the raw statements a
//             request costs, as bench/server.ts's floors: an INSERT then an UPDATE, each committed; a
//             primary-key SELECT; an INSERT, then BEGIN, UPDATE, COMMIT)
// PostgreSQL scenarios also print the server's CPU per request (its backends' user + system time from /proc,
// in 10 ms ticks, so only with the server on this host) and the statements sent per request.
// env: BENCH_REDIS_URL (redis://127.0.0.1:6379/0), BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test),
//      BENCH_SQLITE_SYNCHRONOUS (the SQLite store's `synchronous` option: normal or full; unset: its default),
//      BENCH_REDIS_AUTOPIPELINING=1 (the Redis client with ioredis's `enableAutoPipelining`),
//      BENCH_REDIS_CLIENT=node-redis (the Redis store on a node-redis client, `createClient()` of `redis`,
//      with `disableOfflineQueue`; default ioredis), BENCH_NODE_REDIS_TIMEOUT_MS (that client's
//      `commandOptions.timeout`, 0 for none; unset: node-redis's default, 5,000 ms),
//      BENCH_WARMUP (warm-up requests; default min(requests, 5000)), BENCH_WARM_SIGNAL (set by bench/cpu-instructions.mjs)
// Replays cycle through 64 keys completed before the warm-up.
import { join, resolve } from 'node:path';
import process from 'node:process';
import { setImmediate } from 'node:timers';
import { pathToFileURL } from 'node:url';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';

const [rootArg = '.', scenario = 'memory-replay', nArg, cArg] = process.argv.slice(2);
const root = resolve(rootArg);
const n = Number(nArg ?? 20000);
const conc = Number(cArg ?? 1);
const req = createRequire(join(root, 'package.json'));
const imp = (p) => import(pathToFileURL(join(root, 'dist', p)).href);
const Fastify = req('fastify');

const [scenarioKind, phase] = scenario.split('-');
const viaRun = scenarioKind === 'runredis';
const kind = viaRun ? 'redis' : scenarioKind;
const { createReceiver, createMemoryStore } = await imp('index.js');
let store;
let floorTrips;
let closer = async () => {};
if (kind === 'memory' || kind === 'run') store = createMemoryStore();
if (kind === 'sqlite') {
  const { createSqliteStore } = await imp('stores/sqlite/index.js');
  const synchronous = process.env.BENCH_SQLITE_SYNCHRONOUS;
  store = createSqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'perf-')), 'b.db'), ...(synchronous && { synchronous }) });
}
if (kind === 'redis') {
  const { createRedisStore } = await imp('stores/redis/index.js');
  const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/0';
  let client;
  if (process.env.BENCH_REDIS_CLIENT === 'node-redis') {
    const timeout = process.env.BENCH_NODE_REDIS_TIMEOUT_MS;
    const commandOptions = timeout === undefined ? {} : { commandOptions: { timeout: Number(timeout) } };
    client = await req('redis').createClient({ url, disableOfflineQueue: true, ...commandOptions }).connect();
    closer = async () => client.destroy();
  } else {
    const { Redis } = req('ioredis');
    client = new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      lazyConnect: true,
      enableAutoPipelining: process.env.BENCH_REDIS_AUTOPIPELINING === '1',
    });
    await client.connect();
    closer = async () => client.disconnect();
  }
  store = createRedisStore({ client, prefix: `perf:${process.pid}` });
}
let pgPool;
const backends = new Set();
let statements = 0;
if (kind === 'pg' || kind === 'pgtx' || kind === 'pgfloor') {
  const { createPostgresStore, migrate } = await imp('postgres.js');
  const pg = req('pg');
  pgPool = new pg.Pool({ connectionString: process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 8 });
  pgPool.on('connect', (client) => {
    backends.add(client.processID);
    const query = client.query.bind(client);
    client.query = (...args) => {
      statements++;
      return query(...args);
    };
  });
  const schema = `perf_${process.pid}`;
  await migrate({ pool: pgPool, schema });
  await pgPool.query(`CREATE TABLE "${schema}".bench_floor (k text PRIMARY KEY, v integer NOT NULL)`);
  if (kind !== 'pgfloor') store = createPostgresStore({ pool: pgPool, schema });
  const floor = `"${schema}".bench_floor`;
  if (kind === 'pgfloor') floorTrips = {
    new: async (key) => {
      await pgPool.query(`INSERT INTO ${floor} (k, v) VALUES ($1, 0)`, [key]);
      await pgPool.query(`UPDATE ${floor} SET v = 1 WHERE k = $1`, [key]);
    },
    replay: async (key) => {
      const { rows } = await pgPool.query(`SELECT k, v FROM ${floor} WHERE k = $1`, [key]);
      if (rows.length === 0) await pgPool.query(`INSERT INTO ${floor} (k, v) VALUES ($1, 0)`, [key]);
    },
    tx: async (key) => {
      await pgPool.query(`INSERT INTO ${floor} (k, v) VALUES ($1, 0)`, [key]);
      const client = await pgPool.connect();
      try {
        await client.query('BEGIN');
        await client.query(`UPDATE ${floor} SET v = 1 WHERE k = $1`, [key]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    },
  }[phase];
  closer = async () => { await pgPool.query(`DROP SCHEMA "${schema}" CASCADE`); await pgPool.end(); };
}
/** CPU time (µs) the PostgreSQL backends of the pool used so far. */
function serverCpu() {
  let total = 0;
  for (const pid of backends) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      total += ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
    } catch {
      // A backend this host cannot see.
    }
  }
  return total;
}
const receiver = store ? createReceiver(kind === 'pgtx' ? { store, transactional: true } : { store }) : undefined;

let seq = 0;
const body = '{"amount":1000,"currency":"EUR"}';
let send;
if (kind === 'run' || viaRun) {
  send = (key) => receiver.run({ scope: '', key, fingerprint: 'f'.repeat(64) }, async () => ({ id: ++seq, amount: 1000 }));
} else {
  const app = Fastify({ logger: false });
  if (receiver) {
    const { idempotency } = await imp('http/fastify.js');
    await app.register(idempotency, { receiver });
  }
  app.post('/payments', async (request, reply) => {
    await floorTrips?.(request.headers['idempotency-key']);
    return reply.code(201).send({ id: `pay_${++seq}`, amount: request.body.amount });
  });
  await app.ready();
  send = (key) => app.inject({ method: 'POST', url: '/payments', headers: { 'content-type': 'application/json', 'idempotency-key': key }, payload: body });
}
const pool = Array.from({ length: 64 }, (_, i) => `replay-${process.pid}-${i}`);
for (const k of pool) await send(k);
let k = 0;
const next = () => (phase === 'replay' || kind === 'bare' ? pool[k++ & 63] : `new-${process.pid}-${k++}`);
async function loop(count) {
  let left = count;
  const worker = async () => {
    while (left-- > 0) {
      const r = await send(next());
      if (r.statusCode !== undefined && r.statusCode !== 201) throw new Error(`status ${r.statusCode} ${r.body}`);
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
}
await loop(Number(process.env.BENCH_WARMUP ?? Math.min(n, 5000))); // warm-up
globalThis.gc?.();
if (process.env.BENCH_WARM_SIGNAL) {
  // Under bench/cpu-instructions.mjs: say the warm-up is over, and wait until callgrind counts.
  const { warmedUp } = await import('./callgrind.mjs');
  await warmedUp(process.env.BENCH_WARM_SIGNAL);
}
const c0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
const s0 = serverCpu();
const q0 = statements;
await loop(n);
await new Promise((r) => setImmediate(r));
const c1 = process.cpuUsage(c0);
const wall = Number(process.hrtime.bigint() - t0) / 1e3;
const server = pgPool ? { serverCpuUs: +((serverCpu() - s0) / n).toFixed(1), statements: +((statements - q0) / n).toFixed(2) } : {};
process.stdout.write(JSON.stringify({ root, scenario, n, conc, cpuUs: +((c1.user + c1.system) / n).toFixed(2), wallUs: +(wall / n).toFixed(2), ...server }) + '\n');
await store?.close?.();
await closer();
process.exit(0);
