// CPU per request of a Redis-backed server and of Redis itself, over real sockets: one `npm run bench` server
// (`.bench-build/bench/server.js`, built by `npm run bench` or `npx tsc -p tsconfig.bench.json`) with the
// `redis` config (or `raw-redis-N`, the floors), loaded by `connections` undici clients in this process. The
// server's CPU (user + system, from /proc/<pid>/stat, in 10 ms ticks) and Redis's (`INFO cpu`:
// used_cpu_user + used_cpu_sys) are read around the measured requests and divided by their number; both
// in µs. Redis must run on this host, and nothing else should load it meanwhile.
//
//   node bench/server-redis-cpu.mjs [fastify|express] [config] [new|replay] [measured] [warm] [connections]
//
// Defaults: fastify, redis, new, 30,000 measured requests after 10,000, 32 connections. Prints one JSON
// line with `serverUs`, `redisUs` and the requests per second of the measured window. Environment:
// BENCH_REDIS_URL (redis://127.0.0.1:6379/0), passed on to the server.
import { readFileSync } from 'node:fs';
import process from 'node:process';
import { Redis } from 'ioredis';
import { benchServerScript, requestSender, startBenchServer } from './server-requests.mjs';

const [framework = 'fastify', config = 'redis', scenario = 'new', measuredArg = '30000', warmArg = '10000', connArg = '32'] =
  process.argv.slice(2);
const measured = Number(measuredArg);
const redis = new Redis(process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/0');

/** The process's user + system CPU, in clock ticks of 10 ms (fields 14 and 15 of /proc/<pid>/stat). */
function ticks(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** Redis's own user + system CPU, in seconds. */
async function redisSeconds() {
  const info = await redis.info('cpu');
  const read = (name) => Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? Number.NaN);
  return read('used_cpu_user') + read('used_cpu_sys');
}

const { child: server, exited, port } = await startBenchServer(process.execPath, [benchServerScript(), framework, config], `${framework}/${config}`);
const { send, prime, close } = requestSender(port, scenario, Number(connArg), { prefix: `${scenario}-${process.pid}` });
await prime();
await send(Number(warmArg));
const [serverBefore, redisBefore, started] = [ticks(server.pid), await redisSeconds(), process.hrtime.bigint()];
await send(measured);
const [serverAfter, redisAfter, ended] = [ticks(server.pid), await redisSeconds(), process.hrtime.bigint()];
await close();
server.kill('SIGTERM');
await exited;
await redis.quit();
const round = (x) => Math.round(x * 10) / 10;
process.stdout.write(
  `${JSON.stringify({
    framework,
    config,
    scenario,
    measured,
    serverUs: round(((serverAfter - serverBefore) * 10_000) / measured),
    redisUs: round(((redisAfter - redisBefore) * 1e6) / measured),
    rps: Math.round(measured / (Number(ended - started) / 1e9)),
  })}\n`,
);
