// The server half of bench/peer-instructions.mjs: hosts one column of the peer benchmark (a file of its
// candidates/ or peers/ folder, which exports `start(ctx)`) on a free loopback port, and prints
// `{"port": N}` once it listens (the protocol of bench/server-requests.mjs). `work` is the side effect the
// column calls when its layer decides the operation runs; it counts executions per key, and a key run twice
// ends the process with exit code 3 on SIGTERM, so a count taken of a layer that broke is not a figure
// (unless the column's `meta.idempotent` is false: a bare framework runs every request).
//
//   node bench/peer-column-host.mjs <column file>
//
// env: BENCH_REDIS_URL, BENCH_PG_URL (the column's ctx.redisUrl and ctx.pgUrl; defaults as the harness's).
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';

const [columnFile] = process.argv.slice(2);
const counts = new Map();
let seq = 0;

async function work(key, body) {
  counts.set(key, (counts.get(key) ?? 0) + 1);
  return { id: `pay_${process.pid}_${++seq}`, key, amount: body?.amount ?? null, currency: body?.currency ?? null, status: 'captured' };
}

/** A port nobody listens on now (bound, read and released). */
function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

const column = await import(pathToFileURL(resolve(columnFile)).href);
const port = await freePort();
const handle = await column.start({
  port,
  host: '127.0.0.1',
  work,
  redisUrl: process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379',
  pgUrl: process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/bench',
  keyPrefix: `bench:${column.meta?.id ?? 'column'}:${process.pid}:`,
});
process.stdout.write(`${JSON.stringify({ port })}\n`);
process.once('SIGTERM', async () => {
  await handle?.close?.();
  const doubles = column.meta?.idempotent === false ? 0 : [...counts.values()].filter((count) => count > 1).length;
  process.exit(doubles > 0 ? 3 : 0);
});
