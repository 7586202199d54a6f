// CPU per operation of the Redis store alone (no engine, no HTTP), on both sides of the connection: this
// process's CPU (user + system) and Redis's own (`used_cpu_user + used_cpu_sys` from `INFO cpu`, so run it
// with nothing else using that Redis). `new` claims and completes new keys; `replay` claims one of 1,000
// completed keys (the claim is refused with the record). The saved response is 201, two headers and a
// 78-byte body. Compare two builds by alternating runs.
//
//   node bench/redis-store-cpu.mjs <checkout with a built dist/> <new|replay> [operations] [in flight]
//
// Defaults: 40,000 operations after 5,000, 32 in flight. env: BENCH_REDIS_URL (redis://127.0.0.1:6379/5;
// the database is flushed before and after).
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { TextEncoder } from 'node:util';

const [rootArg = '.', phase = 'new', nArg = '40000', inFlightArg = '32'] = process.argv.slice(2);
if (!['new', 'replay'].includes(phase)) throw new TypeError(`unknown workload ${phase}`);
const root = resolve(rootArg);
const { Redis } = createRequire(join(root, 'package.json'))('ioredis');
const { createRedisStore } = await import(pathToFileURL(join(root, 'dist/stores/redis/index.js')).href);
const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/5';
const client = new Redis(url);
const admin = new Redis(url);
await client.flushdb();
const store = createRedisStore({ client, prefix: 'cpu' });
const response = {
  status: 201,
  headers: { 'content-type': 'application/json', 'x-request-id': 'abcdef0123456789' },
  body: new TextEncoder().encode('{"id":"pay_1","amount":1000,"currency":"EUR","customer":"cus_42","status":"ok"}'),
};
const input = (key) => ({ scope: '', key, fingerprint: 'f'.repeat(64), leaseMs: 30_000, retentionMs: 86_400_000 });
const completed = Array.from({ length: 1000 }, (_, i) => `r-${i}`);
for (const key of completed) {
  const result = await store.claim(input(key));
  await store.complete(result.claim, response, 86_400_000);
}
let k = 0;
const one = async () => {
  if (phase === 'replay') {
    if ((await store.claim(input(completed[k++ % 1000]))).acquired) throw new Error('a replay won its claim');
    return;
  }
  const result = await store.claim(input(`n-${k++}`));
  if (!result.acquired || !(await store.complete(result.claim, response, 86_400_000))) throw new Error('a new key was not claimed and completed');
};
const run = async (count) => {
  let started = 0;
  await Promise.all(Array.from({ length: Number(inFlightArg) }, async () => {
    while (started++ < count) await one();
  }));
};
const redisCpu = async () => {
  const info = await admin.info('cpu');
  return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
};
await run(5000);
const n = Number(nArg);
const redis0 = await redisCpu();
const own0 = process.cpuUsage();
await run(n);
const own = process.cpuUsage(own0);
const redis1 = await redisCpu();
await client.flushdb();
client.disconnect();
admin.disconnect();
process.stdout.write(
  `${JSON.stringify({ root, phase, n, nodeCpuUs: +((own.user + own.system) / n).toFixed(1), redisCpuUs: +(((redis1 - redis0) * 1e6) / n).toFixed(1) })}\n`,
);
