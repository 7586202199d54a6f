// CPU per operation of the Redis store alone (no engine, no HTTP), on both sides of the connection: this
// process's CPU (user + system) and Redis's own (`used_cpu_user + used_cpu_sys` from `INFO cpu`, so run it
// with nothing else using that Redis). `new` claims and completes new keys; `replay` claims one of 1,000
// completed keys (the claim is refused with the record). The saved response is 201, two headers and a
// 78-byte body. Compare two builds by alternating runs.
//
//   node bench/redis-store-cpu.mjs <checkout with a built dist/> <new|replay> [operations] [in flight] [ioredis|node-redis]
//
// Defaults: 40,000 operations after 5,000, 32 in flight, the store on ioredis (`node-redis`: on a node-redis
// client, `createClient()` of `redis`). env: BENCH_REDIS_URL (redis://127.0.0.1:6379/5;
// the database is flushed before and after).
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { benchResponse, storeWorkload } from './store-workload.mjs';

const [rootArg = '.', phase = 'new', nArg = '40000', inFlightArg = '32', driver = 'ioredis'] = process.argv.slice(2);
if (!['new', 'replay'].includes(phase)) throw new TypeError(`unknown workload ${phase}`);
if (!['ioredis', 'node-redis'].includes(driver)) throw new TypeError(`unknown client ${driver}`);
const root = resolve(rootArg);
const { Redis } = createRequire(join(root, 'package.json'))('ioredis');
const { createRedisStore } = await import(pathToFileURL(join(root, 'dist/stores/redis/index.js')).href);
const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/5';
const admin = new Redis(url);
const client = driver === 'ioredis' ? new Redis(url) : await createRequire(join(root, 'package.json'))('redis').createClient({ url }).connect();
await admin.flushdb();
const store = createRedisStore({ client, prefix: 'cpu' });
const one = await storeWorkload(store, phase, { completedKeys: 1000, response: benchResponse(true) });
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
await admin.flushdb();
if (driver === 'ioredis') client.disconnect();
else client.destroy();
admin.disconnect();
process.stdout.write(
  `${JSON.stringify({ root, phase, driver, n, nodeCpuUs: +((own.user + own.system) / n).toFixed(1), redisCpuUs: +(((redis1 - redis0) * 1e6) / n).toFixed(1) })}\n`,
);
