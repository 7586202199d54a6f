// PostgreSQL server CPU per replay: the store's claim of a completed key (its `read_or_insert()`,
// `claim.ts`), the store's `get`, and a bare prepared primary-key SELECT of the columns a replay sends
// (status, headers, body), on the same pool and keys. The backends' CPU is read from /proc (so only with
// the server on this host); it moves with the machine's load, so the rows alternate in rounds and the
// ratio to the bare SELECT of the same round is what to read.
//
//   node bench/pg-replay-server.mjs <checkout with a built dist/> [rounds] [operations] [callers]
//
// rounds: 3; operations: 20000 per row and round; callers: 4 in flight on a pool of 4.
// env: BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test).
import { Buffer } from 'node:buffer';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { serverCpu } from './pg-backends.mjs';

const [rootArg = '.', roundsArg = '3', opsArg = '20000', callersArg = '4'] = process.argv.slice(2);
const root = resolve(rootArg);
const url = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const req = createRequire(join(root, 'package.json'));
const pg = req('pg');
const imp = (p) => import(pathToFileURL(join(root, 'dist', p)).href);
const { createPostgresStore, migrate } = await imp('postgres.js');
const operations = Number(opsArg);
const callers = Number(callersArg);
const FP = 'f'.repeat(64);

const schema = `bench_pgreplay_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: callers });
const pids = new Set();
pool.on('connect', (client) => pids.add(client.processID));
await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
await migrate({ pool, schema });
const store = createPostgresStore({ pool, schema });
const keys = Array.from({ length: 64 }, (_, i) => `replay-${i}`);
const body = Buffer.from(JSON.stringify({ ok: true, id: 'order-1234', amount: 100 }));
for (const key of keys) {
  const won = await store.claim({ scope: 'bench', key, fingerprint: FP, leaseMs: 60_000, retentionMs: 86_400_000 });
  await store.complete(won.claim, { status: 201, headers: { 'content-type': 'application/json' }, body }, 86_400_000);
}
const bare = { name: 'bare_replay', text: `SELECT status, headers, body FROM "${schema}".records WHERE scope = $1 AND key = $2` };
const rows = {
  claim: (key) => store.claim({ scope: 'bench', key, fingerprint: FP, leaseMs: 60_000, retentionMs: 86_400_000 }),
  get: (key) => store.get('bench', key),
  select: (key) => pool.query({ ...bare, values: ['bench', key] }),
};

async function drive(row, total) {
  let next = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (next < total) await rows[row](keys[next++ % keys.length]);
    }),
  );
}

const results = [];
for (let round = 0; round < Number(roundsArg); round++) {
  for (const row of Object.keys(rows)) {
    await drive(row, 2_000);
    const before = serverCpu(pids);
    await drive(row, operations);
    const usPerOp = (serverCpu(pids) - before) / operations;
    results.push({ row, round, serverCpuUsPerOp: Number(usPerOp.toFixed(1)) });
    process.stdout.write(`${JSON.stringify(results.at(-1))}\n`);
  }
}
const median = (values) => values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)];
const medians = Object.fromEntries(Object.keys(rows).map((row) => [row, median(results.filter((r) => r.row === row).map((r) => r.serverCpuUsPerOp))]));
const ratios = Object.fromEntries(
  Object.keys(rows).map((row) => {
    const perRound = results.filter((r) => r.row === row).map((r) => r.serverCpuUsPerOp / results.find((s) => s.row === 'select' && s.round === r.round).serverCpuUsPerOp);
    return [row, Number(median(perRound).toFixed(2))];
  }),
);
process.stdout.write(`${JSON.stringify({ medians, overBareSelect: ratios })}\n`);
await store.close();
await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
await pool.end();
