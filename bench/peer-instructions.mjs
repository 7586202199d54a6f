// Instructions per request of one column of the peer benchmark (retrysafe's, a peer library's, or a least
// layer of bench/peer-columns/), counted by callgrind (valgrind) in the column's server process, so the
// figure does not move with the machine's load the way the harness's requests per second do. The column
// runs in bench/peer-column-host.mjs under callgrind with V8 single-threaded; the load is `connections`
// undici clients in this process sending a fixed number of requests: `warm` first, then `measured` with
// callgrind counting. User space only: the kernel's share of a socket write, and the database's or
// Redis's own work, are not counted. For a Redis column it also gives Redis's commands per request (INFO
// commandstats `calls`, scripts' inner commands included), exact as well.
//
//   node bench/peer-instructions.mjs <peer-bench folder> <column id> <new|replay> [measured] [warm] [connections]
//
// Defaults: 3,000 measured requests after 5,000 warm-up requests, 16 connections. The column file is
// looked up in the folder's candidates/, peers/, then limits/http/ (the bare frameworks; copy bench/peer-columns/ into candidates/ first, as
// for the harness); the ours-* columns need RETRYSAFE_DIR, as in the harness. `replay` cycles through 64
// keys completed before the warm-up; `new` keys carry this process's id, so runs never meet each other's
// records. A key executed twice fails the run (not for a bare framework, which runs every request). env: BENCH_REDIS_URL, BENCH_PG_URL (as the harness's).
// Prints one JSON line.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { instructionsPerRequest } from './callgrind.mjs';
import { requestSender, startBenchServer } from './server-requests.mjs';

const [folderArg, id, scenario, measuredArg = '3000', warmArg = '5000', connArg = '16'] = process.argv.slice(2);
const folder = folderArg === undefined ? undefined : resolve(folderArg);
const columnFile = folder && id && ['candidates', 'peers', 'limits/http'].map((dir) => join(folder, dir, `${id}.mjs`)).find((file) => existsSync(file));
if (!columnFile || !['new', 'replay'].includes(scenario)) {
  process.stderr.write('usage: node bench/peer-instructions.mjs <peer-bench folder> <column id (a file of its candidates/, peers/ or limits/http/)> <new|replay> [measured] [warm] [connections]\n');
  process.exit(2);
}
const measured = Number(measuredArg);
const warm = Number(warmArg);
const connections = Number(connArg);
const { meta } = await import(pathToFileURL(columnFile).href);

const redis = meta?.store === 'redis' ? await redisCommandCounter(process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379') : undefined;
const out = join(tmpdir(), `retrysafe-peer-instructions-${process.pid}.callgrind`);
const host = join(import.meta.dirname, 'peer-column-host.mjs');
const { child, exited, port } = await startBenchServer(
  'valgrind',
  ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, process.execPath, '--single-threaded', host, columnFile],
  id,
);
const { send, prime, close } = requestSender(port, scenario, connections, { prefix: `${scenario}-${process.pid}` });
await prime();
await send(warm);
const before = await redis?.calls();
execFileSync('callgrind_control', ['-i', 'on', String(child.pid)], { stdio: 'ignore' });
await send(measured);
execFileSync('callgrind_control', ['-i', 'off', String(child.pid)], { stdio: 'ignore' });
const after = await redis?.calls();
await close();
child.kill('SIGTERM');
const code = await exited;
await redis?.close();
if (code !== 0) {
  process.stderr.write(`${id}: its server exited with code ${code}${code === 3 ? ' (a key executed twice)' : ''}\n`);
  process.exit(1);
}
const redisCommands = before === undefined ? {} : { redisCommands: +((after - before - 1) / measured).toFixed(2) };
process.stdout.write(`${JSON.stringify({ column: id, scenario, measured, warm, connections, ...instructionsPerRequest(out, measured), ...redisCommands })}\n`);

/** Redis's total command calls so far (INFO commandstats; the INFO that reads them is counted by the next read), over a connection of ioredis's. */
async function redisCommandCounter(url) {
  const { Redis } = createRequire(join(import.meta.dirname, '..', 'package.json'))('ioredis');
  const client = new Redis(url, { lazyConnect: true });
  await client.connect();
  return {
    async calls() {
      const info = await client.info('commandstats');
      let total = 0;
      for (const match of info.matchAll(/calls=(\d+)/g)) total += Number(match[1]);
      return total;
    },
    close: () => client.quit(),
  };
}
