// Instructions per request of one `npm run bench` server, over real sockets, counted by callgrind
// (valgrind), so the figure does not move with the machine's load the way CPU time does. The server is
// `.bench-build/bench/server.js` (built by `npm run bench`, or `npx tsc -p tsconfig.bench.json`) with
// one of its configs, run under callgrind with V8 single-threaded; the load is `connections` undici
// clients in this process, sending a fixed number of requests (not a time window): `warm` first, then
// `measured` with callgrind counting (`callgrind_control -i on`). User space only: the kernel's share of
// a socket write is not counted.
//
//   node bench/server-instructions.mjs <fastify|express|nestjs-express|nestjs-fastify> <config> <no-key|new|replay> [measured] [warm] [connections]
//
// Defaults: 4,000 measured requests after 6,000 warm-up requests, 16 connections. `replay` cycles through
// 64 keys completed before the warm-up, as `npm run bench` does. Only the configs that need no server
// (`bare`, `minimal`, `memory`, `memory-otel`, `sqlite`) are meant here. Prints one JSON line: instructions per
// request, also without V8's optimising compilers and without its garbage collector.
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { instructionsPerRequest } from './callgrind.mjs';
import { benchServerScript, requestSender, startBenchServer } from './server-requests.mjs';

const [framework = 'fastify', config = 'memory', scenario = 'new', measuredArg = '4000', warmArg = '6000', connArg = '16'] =
  process.argv.slice(2);
const measured = Number(measuredArg);
const warm = Number(warmArg);
const connections = Number(connArg);
if (!['fastify', 'express', 'nestjs-express', 'nestjs-fastify'].includes(framework) || !['no-key', 'new', 'replay'].includes(scenario)) {
  process.stderr.write('usage: node bench/server-instructions.mjs <fastify|express|nestjs-express|nestjs-fastify> <config> <no-key|new|replay> [measured] [warm] [connections]\n');
  process.exit(2);
}
const serverScript = benchServerScript();
const out = join(tmpdir(), `retrysafe-server-instructions-${process.pid}.callgrind`);
const { child, exited, port } = await startBenchServer(
  'valgrind',
  ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, process.execPath, '--single-threaded', serverScript, framework, config],
  `${framework}/${config}`,
);
const { send, prime, close } = requestSender(port, scenario, connections);

await prime();
await send(warm);
execFileSync('callgrind_control', ['-i', 'on', String(child.pid)], { stdio: 'ignore' });
await send(measured);
execFileSync('callgrind_control', ['-i', 'off', String(child.pid)], { stdio: 'ignore' });
await close();
child.kill('SIGTERM');
await exited;

process.stdout.write(`${JSON.stringify({ framework, config, scenario, measured, warm, connections, ...instructionsPerRequest(out, measured) })}\n`);
