// Instructions per request of the gateway, or of the bare undici reverse proxy it is compared with, over
// real sockets, counted by callgrind (valgrind) in the proxy's process only, so the figure does not move
// with the machine's load. The upstream runs beside it uncounted; the load is `connections` undici clients
// in this process, sending a fixed number of requests: `warm` first, then `measured` with callgrind counting.
// User space only: the kernel's share of a socket write is not counted.
//
//   node bench/gateway-instructions.mjs <bare no-key | gateway <new|replay>> [measured] [warm] [connections] [store]
//
// Defaults: 4,000 measured requests after 6,000 warm-up requests, 16 connections, store `sqlite` (a new
// file). The gateway is `dist/cli/main.js` (`npm run build`). `replay`
// cycles through 64 keys completed before the warm-up. Prints one JSON line: instructions per request,
// also without V8's optimising compilers and without its garbage collector. `CALLGRIND_OUT=<file>` keeps
// callgrind's output there, for `callgrind_annotate --inclusive=yes <file>`.
import { execFileSync } from 'node:child_process';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { instructionsPerRequest } from './callgrind.mjs';
import { BARE_PROXY, freePort, gatewayScript, start, UPSTREAM, writeGatewayConfig } from './gateway-servers.mjs';
import { requestSender } from './server-requests.mjs';

const [target = 'gateway', scenario = 'new', measuredArg = '4000', warmArg = '6000', connArg = '16', store = 'sqlite'] = process.argv.slice(2);
const measured = Number(measuredArg);
const warm = Number(warmArg);
const connections = Number(connArg);
if (target === 'bare' ? scenario !== 'no-key' : target !== 'gateway' || !['new', 'replay'].includes(scenario)) {
  process.stderr.write('usage: node bench/gateway-instructions.mjs <bare no-key | gateway <new|replay>> [measured] [warm] [connections] [store]\n');
  process.exit(2);
}
const dir = await mkdtemp(join(tmpdir(), 'retrysafe-gateway-instructions-'));
const out = join(dir, 'out.callgrind');
const children = [];
try {
  const [upstreamPort, port] = await Promise.all([freePort(), freePort()]);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  children.push(await start(process.execPath, ['-e', UPSTREAM, String(upstreamPort)], 'ready'));
  const valgrind = ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, process.execPath, '--single-threaded'];
  let proxy;
  if (target === 'bare') {
    proxy = await start('valgrind', [...valgrind, '-e', BARE_PROXY, String(port), upstream], 'ready');
  } else {
    const config = join(dir, 'gateway.json');
    await writeGatewayConfig(config, port, store === 'sqlite' ? `sqlite:${join(dir, 'gateway.db')}` : store, upstream);
    proxy = await start('valgrind', [...valgrind, gatewayScript(), 'gateway', '--config', config], 'listening on');
  }
  children.push(proxy);
  const { send, prime, close } = requestSender(port, scenario, connections, { prefix: `${scenario}-${Date.now().toString(36)}` });
  await prime();
  await send(warm);
  execFileSync('callgrind_control', ['-i', 'on', String(proxy.child.pid)], { stdio: 'ignore' });
  await send(measured);
  execFileSync('callgrind_control', ['-i', 'off', String(proxy.child.pid)], { stdio: 'ignore' });
  await close();
  proxy.child.kill('SIGTERM');
  await proxy.exited;
  if (process.env.CALLGRIND_OUT) await copyFile(out, process.env.CALLGRIND_OUT);
  process.stdout.write(`${JSON.stringify({ target, scenario, store, measured, warm, connections, ...instructionsPerRequest(out, measured) })}\n`);
} finally {
  for (const { child, exited } of children) {
    child.kill('SIGTERM');
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
}
