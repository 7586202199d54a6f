// Server CPU per request, in one process, with no sockets: N requests through fastify.inject() (or
// receiver.run for `run-*`), `concurrency` in flight, after a warm-up; prints the process's CPU time
// (user + system, microseconds) per request. Compare two builds by alternating runs and taking medians:
//
//   node bench/cpu.mjs <checkout with a built dist/> <scenario> [requests] [concurrency]
//
// scenario: bare | memory-new | memory-replay | run-new | run-replay | sqlite-new | sqlite-replay |
//           redis-new | redis-replay | runredis-new | runredis-replay (receiver.run on the Redis store, no HTTP) |
//           pg-new | pg-replay | pgtx-new | pgtx-replay
// env: BENCH_REDIS_URL (redis://127.0.0.1:6379/0), BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test),
//      BENCH_SQLITE_SYNCHRONOUS (the SQLite store's `synchronous` option: normal or full; unset: its default),
//      BENCH_REDIS_AUTOPIPELINING=1 (the Redis client with ioredis's `enableAutoPipelining`)
// Replays cycle through 64 keys completed before the warm-up.
import { join, resolve } from 'node:path';
import process from 'node:process';
import { setImmediate } from 'node:timers';
import { pathToFileURL } from 'node:url';
import { mkdtempSync } from 'node:fs';
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
let closer = async () => {};
if (kind === 'memory' || kind === 'run') store = createMemoryStore();
if (kind === 'sqlite') {
  const { createSqliteStore } = await imp('stores/sqlite/index.js');
  const synchronous = process.env.BENCH_SQLITE_SYNCHRONOUS;
  store = createSqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'perf-')), 'b.db'), ...(synchronous && { synchronous }) });
}
if (kind === 'redis') {
  const { createRedisStore } = await imp('stores/redis/index.js');
  const { Redis } = req('ioredis');
  const client = new Redis(process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/0', {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    lazyConnect: true,
    enableAutoPipelining: process.env.BENCH_REDIS_AUTOPIPELINING === '1',
  });
  await client.connect();
  store = createRedisStore({ client, prefix: `perf:${process.pid}` });
  closer = async () => client.disconnect();
}
if (kind === 'pg' || kind === 'pgtx') {
  const { createPostgresStore, migrate } = await imp('postgres.js');
  const pg = req('pg');
  const pool = new pg.Pool({ connectionString: process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 8 });
  const schema = `perf_${process.pid}`;
  await migrate({ pool, schema });
  store = createPostgresStore({ pool, schema });
  closer = async () => { await pool.query(`DROP SCHEMA "${schema}" CASCADE`); await pool.end(); };
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
  app.post('/payments', async (request, reply) => reply.code(201).send({ id: `pay_${++seq}`, amount: request.body.amount }));
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
await loop(Math.min(n, 5000)); // warm-up
globalThis.gc?.();
const c0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
await loop(n);
await new Promise((r) => setImmediate(r));
const c1 = process.cpuUsage(c0);
const wall = Number(process.hrtime.bigint() - t0) / 1e3;
process.stdout.write(JSON.stringify({ root, scenario, n, conc, cpuUs: +((c1.user + c1.system) / n).toFixed(2), wallUs: +(wall / n).toFixed(2) }) + '\n');
await store?.close?.();
await closer();
process.exit(0);
