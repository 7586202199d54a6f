// Async resources per request of one `npm run bench` server (`.bench-build/bench/server.js`, built by
// `npm run bench` or `npx tsc -p tsconfig.bench.json`), by type: promises, `process.nextTick` callbacks
// (TickObject), timers, microtasks. Counted by an `async_hooks` init hook preloaded into the server
// (`async-counter.mjs`) over `measured` sequential requests after `warm`, so the figure is exact and does not
// move with the machine's load. Each promise is an allocation and, when it settles, at least one microtask.
// With the hook on, each `await` also shows up as a promise of its own, so the promise count is an upper
// bound of what a request creates without it.
//
//   node bench/server-async.mjs <fastify|express> <config> <no-key|new|replay> [measured] [warm]
//
// Defaults: 2,000 measured requests after 500. Only the configs that need no server (`bare`, `minimal`,
// `memory`, `sqlite`) are meant here. Prints one JSON line: the count per request of each type.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import process from 'node:process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { benchServerScript, requestSender } from './server-requests.mjs';

const [framework = 'fastify', config = 'memory', scenario = 'new', measuredArg = '2000', warmArg = '500'] = process.argv.slice(2);
const measured = Number(measuredArg);
const server = spawn(process.execPath, ['--import', join(import.meta.dirname, 'async-counter.mjs'), benchServerScript(), framework, config], {
  stdio: ['ignore', 'pipe', 'pipe'],
});
const exited = new Promise((done) => server.once('exit', done));
let port;
for await (const line of createInterface({ input: server.stdout })) {
  port = JSON.parse(line).port;
  break;
}
if (port === undefined) throw new Error(`the ${framework}/${config} server exited before listening`);
const counts = [];
createInterface({ input: server.stderr }).on('line', (line) => {
  if (line.startsWith('{')) counts.push(JSON.parse(line));
});
/** The server's counts so far, once its stderr line has arrived. */
const snapshot = async () => {
  const before = counts.length;
  server.kill('SIGUSR2');
  while (counts.length === before) {
    if (server.exitCode !== null) throw new Error(`the ${framework}/${config} server exited with ${server.exitCode}`);
    await sleep(20);
  }
  return counts[counts.length - 1];
};
const { send, prime, close } = requestSender(port, scenario, 1);
await prime();
await send(Number(warmArg));
const start = await snapshot();
await send(measured);
const end = await snapshot();
await close();
server.kill('SIGTERM');
await exited;
const perRequest = {};
for (const [type, count] of Object.entries(end)) {
  const delta = (count - (start[type] ?? 0)) / measured;
  if (delta > 0) perRequest[type] = Math.round(delta * 100) / 100;
}
process.stdout.write(`${JSON.stringify({ framework, config, scenario, measured, perRequest })}\n`);
