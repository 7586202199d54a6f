// Server CPU per request, kernel included, split by where it runs: one `npm run bench` server
// (`.bench-build/bench/server.js`, built by `npm run bench` or `npx tsc -p tsconfig.bench.json`) under
// `perf record` (software clock, 4,999 samples per second of CPU, JIT frames named through
// `--perf-basic-prof-only-functions`), loaded by `connections` undici clients in this process. Samples ÷ rate
// ÷ requests gives µs of CPU per request; the split is by binary: Node.js itself (V8's builtins and
// runtime, libuv, the bindings), JIT-compiled JavaScript, the kernel (sockets, syscalls), libc, native
// addons (better-sqlite3).
//
//   node bench/server-perf.mjs <fastify|express> <config> <no-key|new|replay> [measured] [warm] [connections]
//
// Defaults: 40,000 measured requests after 10,000, 16 connections. Only the configs that need no server
// (`bare`, `minimal`, `memory`, `sqlite`) are meant here. Needs `perf` (Debian's linux-perf) with access to this
// process's children. Prints one JSON line. Environment:
// - `FILL=N`: N new keys sent before the warm-up, so the store already holds that many records;
// - `REPLAY_KEYS=N`: the number of completed keys `replay` cycles through (64 by default);
// - `PERF_DATA=<file>`: record call graphs too (`perf record -g`) and keep the profile in <file>, for
//   `perf report -i <file>`.
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { benchServerScript, requestSender, startBenchServer } from './server-requests.mjs';

const [framework = 'fastify', config = 'memory', scenario = 'new', measuredArg = '40000', warmArg = '10000', connArg = '16'] =
  process.argv.slice(2);
const RATE = 4999;
const connections = Number(connArg);
const { child: server, exited, port } = await startBenchServer(
  process.execPath,
  ['--perf-basic-prof-only-functions', benchServerScript(), framework, config],
  `${framework}/${config}`,
);
const replayKeys = Number(process.env.REPLAY_KEYS ?? 64);
const keep = process.env.PERF_DATA;
const { send, prime, close } = requestSender(port, scenario, connections, { replayKeys });

if (process.env.FILL) {
  const fill = requestSender(port, 'new', connections, { prefix: 'fill' });
  await fill.send(Number(process.env.FILL));
  await fill.close();
}
await prime();
await send(Number(warmArg));
const dir = mkdtempSync(join(tmpdir(), 'retrysafe-server-perf-'));
const data = join(dir, 'perf.data');
const perf = spawn('perf', ['record', ...(keep ? ['-g'] : []), '-e', 'cpu-clock', '-F', String(RATE), '-o', data, '-p', String(server.pid)], { stdio: 'ignore' });
await sleep(500);
const measured = Number(measuredArg);
await send(measured);
perf.kill('SIGINT');
await new Promise((done) => perf.once('exit', done));
await close();
server.kill('SIGTERM');
await exited;

const report = execFileSync('perf', ['report', '-i', data, '--stdio', '--no-children', '--sort', 'dso', '-F', 'sample,dso'], {
  encoding: 'utf8',
  maxBuffer: 1 << 26,
  stdio: ['ignore', 'pipe', 'ignore'],
});
if (keep) copyFileSync(data, keep);
rmSync(dir, { recursive: true, force: true });
const perRequest = (samples) => Math.round((samples / RATE / measured) * 1e7) / 10;
const where = {};
let total = 0;
for (const line of report.split('\n')) {
  const match = /^\s*(\d+)\s+(.+?)\s*$/.exec(line);
  if (!match) continue;
  const samples = Number(match[1]);
  const dso = match[2].startsWith('[JIT]') ? 'JIT' : match[2].replace(/^\[|\]$/g, '');
  where[dso] = (where[dso] ?? 0) + samples;
  total += samples;
}
const split = Object.fromEntries(Object.entries(where).sort((a, b) => b[1] - a[1]).map(([dso, samples]) => [dso, perRequest(samples)]));
process.stdout.write(`${JSON.stringify({ framework, config, scenario, measured, connections, cpuUsPerRequest: perRequest(total), split })}\n`);
