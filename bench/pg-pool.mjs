// PostgreSQL store by pool size: operations per second, round trips per operation, and the CPU time per
// operation of this process and of the server's backends (read from /proc, so only with the server on this
// host), through receiver.run (no HTTP), `callers` operations in flight, after a warm-up:
//
//   node bench/pg-pool.mjs <checkout with a built dist/> [rounds] [sizes] [callers]
//
// rounds: 3; sizes: 4,8,16,32 (pg.Pool `max`); callers: 32. Per size and round, three workloads, each on
// a fresh pool and schema: `new` (plain mode, every key new: claim + complete), `tx` (transactional mode,
// the handler INSERTs one row through its transaction: claim, BEGIN, INSERT, complete, COMMIT) and
// `replay` (64 completed keys claimed again). Prints one JSON line per measurement, then the medians.
// env: BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test), BENCH_NEW (3000), BENCH_REPLAY (8000).
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { countingPool, serverCpu } from './pg-backends.mjs';

const [rootArg = '.', roundsArg = '3', sizesArg = '4,8,16,32', callersArg = '32'] = process.argv.slice(2);
const root = resolve(rootArg);
const url = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const counts = { new: Number(process.env.BENCH_NEW ?? 3000), tx: Number(process.env.BENCH_NEW ?? 3000), replay: Number(process.env.BENCH_REPLAY ?? 8000) };
const req = createRequire(join(root, 'package.json'));
const pg = req('pg');
const imp = (p) => import(pathToFileURL(join(root, 'dist', p)).href);
const { createReceiver } = await imp('index.js');
const { createPostgresStore, migrate } = await imp('postgres.js');

async function measure(workload, max, callers) {
  const { pool, pids, counter } = countingPool(pg, url, max);
  const schema = `bench_pool_${process.pid}_${max}_${workload}`;
  await migrate({ pool, schema });
  await pool.query(`CREATE TABLE "${schema}".charges (id text PRIMARY KEY, amount integer)`);
  const store = createPostgresStore({ pool, schema });
  const receiver = createReceiver(workload === 'tx' ? { store, transactional: true } : { store });
  const charge = `INSERT INTO "${schema}".charges (id, amount) VALUES ($1, $2)`;
  let k = 0;
  const one = () => {
    const key = workload === 'replay' ? `r${k++ & 63}` : `n${k++}`;
    return receiver.run({ scope: '', key, fingerprint: 'f'.repeat(64) }, async ({ tx }) => {
      if (workload === 'tx') await tx.query({ name: 'bench_charge', text: charge, values: [key, 1000] });
      return { key };
    });
  };
  for (let i = 0; i < 64; i++) await receiver.run({ scope: '', key: `r${i}`, fingerprint: 'f'.repeat(64) }, async () => ({ i }));
  const loop = async (n) => {
    let left = n;
    await Promise.all(Array.from({ length: callers }, async () => {
      while (left-- > 0) await one();
    }));
  };
  await loop(Math.min(1000, counts[workload]));
  const n = counts[workload];
  counter.statements = 0;
  const s0 = serverCpu(pids);
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await loop(n);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const c1 = process.cpuUsage(c0);
  const s1 = serverCpu(pids);
  await store.close();
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
  return {
    workload,
    max,
    callers,
    opsPerSec: Math.round(n / seconds),
    statementsPerOp: +(counter.statements / n).toFixed(2),
    clientCpuUs: +((c1.user + c1.system) / n).toFixed(1),
    serverCpuUs: +((s1 - s0) / n).toFixed(1),
  };
}

const sizes = sizesArg.split(',').map(Number);
const results = [];
for (let round = 0; round < Number(roundsArg); round++) {
  for (const workload of ['new', 'tx', 'replay']) {
    // Alternate the order of the sizes, so the machine's drift falls on all of them.
    for (const max of round % 2 ? [...sizes].reverse() : sizes) {
      const result = await measure(workload, max, Number(callersArg));
      results.push(result);
      process.stdout.write(`${JSON.stringify(result)}\n`);
    }
  }
}
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};
process.stdout.write('\n| workload | max | ops/s (median) | statements/op | client CPU µs/op | server CPU µs/op |\n|---|---:|---:|---:|---:|---:|\n');
for (const workload of ['new', 'tx', 'replay']) {
  for (const max of sizes) {
    const rows = results.filter((r) => r.workload === workload && r.max === max);
    const pick = (field) => median(rows.map((r) => r[field]));
    process.stdout.write(`| ${workload} | ${max} | ${pick('opsPerSec')} | ${pick('statementsPerOp')} | ${pick('clientCpuUs')} | ${pick('serverCpuUs')} |\n`);
  }
}
