// Instructions Redis itself runs per store operation, counted by callgrind: a separate `redis-server` on a
// spare port runs under callgrind, and the Redis store of a checkout drives it, one operation at a time on
// one connection. `new` claims and completes a new key; `replay` claims one of 64 completed keys (the claim
// is refused with the record). User space only: the kernel's share of each round trip is not counted.
// `commands` is Redis's `INFO commandstats` over the measured operations, in calls per operation (commands
// run inside scripts counted too).
//
//   node bench/redis-instructions.mjs <checkout with a built dist/> <new|replay> [measured] [warm-up] [port] [ioredis|node-redis]
//
// Defaults: 5,000 measured operations after 2,000, port 6390, the store on ioredis (`node-redis`: on a
// node-redis client, `createClient()` of `redis`; the counting and stats stay on ioredis). Needs valgrind,
// callgrind_annotate and redis-server.
import { execFileSync, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { benchResponse, storeWorkload } from './store-workload.mjs';

const [rootArg = '.', phase = 'new', measuredArg = '5000', warmArg = '2000', portArg = '6390', driver = 'ioredis'] = process.argv.slice(2);
if (!['new', 'replay'].includes(phase)) throw new TypeError(`unknown workload ${phase}`);
if (!['ioredis', 'node-redis'].includes(driver)) throw new TypeError(`unknown client ${driver}`);
const root = resolve(rootArg);
const [measured, warm, port] = [Number(measuredArg), Number(warmArg), Number(portArg)];
const out = join(tmpdir(), `retrysafe-redis-callgrind-${process.pid}`);

const server = spawn(
  'valgrind',
  ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, 'redis-server', '--port', String(port), '--save', '', '--appendonly', 'no'],
  { stdio: 'ignore' },
);
const exited = new Promise((done) => server.once('exit', done));
const { Redis } = createRequire(join(root, 'package.json'))('ioredis');
const { createRedisStore } = await import(pathToFileURL(join(root, 'dist/stores/redis/index.js')).href);
const client = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
// Refused connections while valgrind starts the server are retried below; ioredis would also log each.
client.on('error', () => undefined);
for (let attempt = 0; ; attempt++) {
  try {
    await client.connect();
    break;
  } catch (error) {
    if (attempt === 100) throw error;
    await sleep(300);
  }
}
const storeClient = driver === 'ioredis' ? client : await createRequire(join(root, 'package.json'))('redis').createClient({ socket: { port } }).connect();
const store = createRedisStore({ client: storeClient, prefix: 'bench' });
const one = await storeWorkload(store, phase, { completedKeys: 64, response: benchResponse() });
for (let i = 0; i < warm; i++) await one();
await client.config('RESETSTAT');
execFileSync('callgrind_control', ['-i', 'on', String(server.pid)], { stdio: 'ignore' });
for (let i = 0; i < measured; i++) await one();
execFileSync('callgrind_control', ['-i', 'off', String(server.pid)], { stdio: 'ignore' });
const commands = {};
for (const [, name, calls] of (await client.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
  if (!name.startsWith('config') && name !== 'info') commands[name] = Math.round((Number(calls) / measured) * 100) / 100;
}
await store.close();
if (storeClient !== client) storeClient.destroy();
await client.shutdown('NOSAVE').catch(() => undefined);
client.disconnect();
await exited;
const annotated = execFileSync('callgrind_annotate', ['--threshold=100', out], { encoding: 'utf8', maxBuffer: 1 << 28 });
rmSync(out, { force: true });
const total = Number(/([\d,]+)\s+\([^)]*\)\s+PROGRAM TOTALS/.exec(annotated)?.[1].replaceAll(',', '') ?? Number.NaN);
process.stdout.write(`${JSON.stringify({ root, phase, driver, measured, redisInstructions: Math.round(total / measured), commands })}\n`);
