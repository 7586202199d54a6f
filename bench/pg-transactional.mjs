// PostgreSQL transactional mode by where it claims, against plain mode, through receiver.run (no HTTP):
// WAL syncs, WAL records and WAL bytes per new key (pg_stat_wal, exact and unmoved by the machine's load,
// but database-wide: run it on a quiet database), statements per key (round trips), the server backends'
// CPU per key (from /proc, so only with the server on this host), and operations per second (a rough
// ratio only: it moves with the load).
//
//   node bench/pg-transactional.mjs <checkout with a built dist/> [rounds] [keys] [callers] [pool]
//
// rounds: 3; keys: 2000 new keys per measurement; callers: 16 in flight; pool: 16 (pg.Pool `max`).
// Workloads, interleaved round by round, each on a fresh pool and schema: `plain` (claim + complete),
// `apart` (transactional, the claim committed apart: claim, BEGIN, INSERT, complete, COMMIT) and `locked`
// (transactional, `transactionalClaim: 'locked'`: BEGIN with the key's lock, read, INSERT, insert
// completed, COMMIT); the transactional handler INSERTs one row through its transaction. Prints one JSON
// line per measurement, then the medians.
// env: BENCH_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test).
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { countingPool, serverCpu } from './pg-backends.mjs';

const [rootArg = '.', roundsArg = '3', keysArg = '2000', callersArg = '16', poolArg = '16'] = process.argv.slice(2);
const root = resolve(rootArg);
const url = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const req = createRequire(join(root, 'package.json'));
const pg = req('pg');
const imp = (p) => import(pathToFileURL(join(root, 'dist', p)).href);
const { createReceiver } = await imp('index.js');
const { createPostgresStore, migrate } = await imp('postgres.js');
const keys = Number(keysArg);
const callers = Number(callersArg);

/** The database-wide WAL counters, once every backend that wrote has reported them (stats flush at most every second, and at exit). */
async function wal(admin) {
  await sleep(1_200);
  const { rows } = await admin.query('SELECT wal_sync::int8 AS sync, wal_records::int8 AS records, wal_bytes::int8 AS bytes FROM pg_stat_wal');
  return { sync: Number(rows[0].sync), records: Number(rows[0].records), bytes: Number(rows[0].bytes) };
}

async function measure(admin, workload, round) {
  const schema = `bench_pgtx_${process.pid}_${workload}_${round}`;
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await migrate({ pool: admin, schema });
  await admin.query(`CREATE TABLE "${schema}".charges (id text PRIMARY KEY, amount integer)`);
  const { pool, pids, counter } = countingPool(pg, url, Number(poolArg));
  const store = createPostgresStore({ pool, schema, transactionalClaim: workload === 'locked' ? 'locked' : 'apart' });
  const receiver = createReceiver(workload === 'plain' ? { store } : { store, transactional: true });
  const charge = `INSERT INTO "${schema}".charges (id, amount) VALUES ($1, $2)`;
  let k = 0;
  const one = (prefix) => {
    const key = `${prefix}-${k++}`;
    return receiver.run({ scope: 'bench', key, fingerprint: 'f'.repeat(64) }, async ({ tx }) => {
      if (tx !== undefined) await tx.query({ name: 'charge', text: charge, values: [key, 1] });
      return { ok: true };
    });
  };
  const drive = async (prefix, total) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: callers }, async () => {
        while (next++ < total) await one(prefix);
      }),
    );
  };
  await drive('warm', 200);
  const before = await wal(admin);
  const statementsBefore = counter.statements;
  const cpuBefore = serverCpu(pids);
  const started = performance.now();
  await drive('k', keys);
  const seconds = (performance.now() - started) / 1000;
  const cpu = serverCpu(pids) - cpuBefore;
  const sent = counter.statements - statementsBefore;
  await store.close();
  await pool.end();
  const after = await wal(admin);
  await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
  return {
    workload,
    round,
    opsPerSec: Math.round(keys / seconds),
    walSyncsPerKey: Number(((after.sync - before.sync) / keys).toFixed(3)),
    walRecordsPerKey: Number(((after.records - before.records) / keys).toFixed(2)),
    walBytesPerKey: Math.round((after.bytes - before.bytes) / keys),
    statementsPerKey: Number((sent / keys).toFixed(2)),
    serverCpuUsPerKey: Math.round(cpu / keys),
  };
}

const admin = new pg.Pool({ connectionString: url, max: 2 });
const results = [];
for (let round = 0; round < Number(roundsArg); round++) {
  for (const workload of ['plain', 'apart', 'locked']) {
    const result = await measure(admin, workload, round);
    results.push(result);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
}
await admin.end();
const median = (values) => values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)];
const summary = {};
for (const workload of ['plain', 'apart', 'locked']) {
  const mine = results.filter((result) => result.workload === workload);
  summary[workload] = Object.fromEntries(['opsPerSec', 'walSyncsPerKey', 'walRecordsPerKey', 'walBytesPerKey', 'statementsPerKey', 'serverCpuUsPerKey'].map((field) => [field, median(mine.map((result) => result[field]))]));
}
summary.ratios = {
  apartOverPlain: Number((summary.apart.opsPerSec / summary.plain.opsPerSec).toFixed(2)),
  lockedOverPlain: Number((summary.locked.opsPerSec / summary.plain.opsPerSec).toFixed(2)),
};
process.stdout.write(`${JSON.stringify({ medians: summary })}\n`);
