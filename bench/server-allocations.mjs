// Bytes allocated per request by one `npm run bench` server (`.bench-build/bench/server.js`, built by
// `npm run bench` or `npx tsc -p tsconfig.bench.json`), by the function that allocated them: V8's sampling
// heap profiler (one sample per 256 bytes on average, objects already collected included), preloaded into
// the server by `allocation-sampler.mjs`, switched on after the warm-up. Functions V8 inlined into a caller
// count as that caller. The load is `connections` undici clients in this process.
//
//   node bench/server-allocations.mjs <fastify|express> <config> <no-key|new|replay> [measured] [warm] [connections] [top]
//
// Defaults: 20,000 measured requests after 8,000, 32 connections, the 30 functions that allocate most.
// Only the configs that need no server (`bare`, `minimal`, `memory`, `sqlite`) are meant here. Prints one JSON line:
// the bytes per request in all, and per function (`name file:line`).
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { benchServerScript, requestSender, startBenchServer } from './server-requests.mjs';

const [framework = 'fastify', config = 'memory', scenario = 'new', measuredArg = '20000', warmArg = '8000', connArg = '32', topArg = '30'] =
  process.argv.slice(2);
const measured = Number(measuredArg);
const dir = mkdtempSync(join(tmpdir(), 'retrysafe-server-allocations-'));
const profileFile = join(dir, 'profile.json');
process.env.RETRYSAFE_ALLOCATION_PROFILE = profileFile;
const { child: server, exited, port } = await startBenchServer(
  process.execPath,
  ['--import', join(import.meta.dirname, 'allocation-sampler.mjs'), benchServerScript(), framework, config],
  `${framework}/${config}`,
);
const { send, prime, close } = requestSender(port, scenario, Number(connArg));
await prime();
await send(Number(warmArg));
server.kill('SIGUSR1');
await sleep(200);
await send(measured);
server.kill('SIGUSR2');
await exited;
await close();

const byFunction = new Map();
const walk = (node) => {
  const { functionName, url, lineNumber } = node.callFrame;
  const name = `${functionName || '(anonymous)'} ${url.split('/').pop()}:${lineNumber + 1}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + node.selfSize);
  for (const child of node.children) walk(child);
};
walk(JSON.parse(readFileSync(profileFile, 'utf8')).head);
rmSync(dir, { recursive: true, force: true });
let total = 0;
for (const bytes of byFunction.values()) total += bytes;
const top = [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg));
process.stdout.write(
  `${JSON.stringify({ framework, config, scenario, measured, bytesPerRequest: Math.round(total / measured), top: Object.fromEntries(top.map(([name, bytes]) => [name, Math.round(bytes / measured)])) })}\n`,
);
