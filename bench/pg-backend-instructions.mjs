// Instructions a PostgreSQL backend spends per new key and per replay, counted by callgrind in the
// backend itself, so the figure does not move with the machine's load. Rows: the store's new key (its
// claim, then its completion), the store's replay (its claim of a completed key), and the raw floors on
// a table shaped as the peer bench's floor column (`peer-columns/floor-postgres.mjs`): a named `INSERT`
// then a named `UPDATE`, one named primary-key `SELECT`. Also per new key: WAL records and bytes
// (`pg_stat_wal`, so the server should serve nothing else) and how many of the row's updates were HOT.
//
// The server must run under callgrind, which follows its backends' forks and writes one file per
// backend when it exits, e.g. a scratch cluster:
//
//   valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=<dir>/cg.%p postgres -D <data>
//   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:<port>/<db> BENCH_CALLGRIND_DIR=<dir> \
//     node bench/pg-backend-instructions.mjs <checkout with a built dist/> <new|replay|floor-new|floor-replay> [ops]
//
// Each row runs twice on a fresh connection (one backend), with `ops` and with twice `ops` operations
// after the same warm-up; the difference of the backend's totals over `ops` is the cost per operation,
// without the connection's start and end. ops: 2,000. BENCH_CALLGRIND_KEEP=1 keeps the backends' files
// (their paths on stderr) for callgrind_annotate.
import { Buffer } from 'node:buffer';
import { backendInstructions } from './pg-backends.mjs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const [rootArg = '.', row = 'new', opsArg = '2000'] = process.argv.slice(2);
const root = resolve(rootArg);
const url = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const dir = process.env.BENCH_CALLGRIND_DIR;
if (dir === undefined || !['new', 'replay', 'floor-new', 'floor-replay'].includes(row)) {
  process.stderr.write('usage: BENCH_CALLGRIND_DIR=<dir> node bench/pg-backend-instructions.mjs <root> <new|replay|floor-new|floor-replay> [ops]\n');
  process.exit(2);
}
const req = createRequire(join(root, 'package.json'));
const pg = req('pg');
const { createPostgresStore, migrate } = await import(pathToFileURL(join(root, 'dist', 'postgres.js')).href);
const ops = Number(opsArg);
const WARM = 500;
const FP = 'f'.repeat(64);
const RETENTION = 86_400_000;
const TYPE = 'application/json; charset=utf-8';
const body = Buffer.from(JSON.stringify({ id: 'pay_1234', amount: 1000 }));
const response = { status: 201, headers: { 'content-type': TYPE }, body };
const schema = `bench_pgbackend_${process.pid}`;
const table = `"${schema}".floor`;

const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
await migrate({ pool: admin, schema });
await admin.query(`CREATE TABLE ${table} (key text PRIMARY KEY, status int NOT NULL DEFAULT 0, type text, body text)`);
const insert = { name: 'floor_insert', text: `INSERT INTO ${table} (key) VALUES ($1)` };
const update = { name: 'floor_update', text: `UPDATE ${table} SET status = $2, type = $3, body = $4 WHERE key = $1` };
const select = { name: 'floor_select', text: `SELECT status, type, body FROM ${table} WHERE key = $1` };
const replayKeys = Array.from({ length: 64 }, (_, i) => `replay-${i}`);
{
  const store = createPostgresStore({ pool: admin, schema, listen: false });
  for (const key of replayKeys) {
    const won = await store.claim({ scope: 'bench', key, fingerprint: FP, leaseMs: 60_000, retentionMs: RETENTION });
    await store.complete(won.claim, response, RETENTION);
    await admin.query({ ...insert, values: [key] });
    await admin.query({ ...update, values: [key, 201, TYPE, body.toString()] });
  }
  await store.close();
}

let fresh = 0;
/** One operation of the row on `pool` (`store` on it), the `i`th of its run. */
function operation(pool, store, i) {
  switch (row) {
    case 'new':
      return store
        .claim({ scope: 'bench', key: `new-${fresh++}`, fingerprint: FP, leaseMs: 60_000, retentionMs: RETENTION })
        .then((won) => store.complete(won.claim, response, RETENTION));
    case 'replay':
      return store.claim({ scope: 'bench', key: replayKeys[i & 63], fingerprint: FP, leaseMs: 60_000, retentionMs: RETENTION });
    case 'floor-new': {
      const key = `new-${fresh++}`;
      return pool.query({ ...insert, values: [key] }).then(() => pool.query({ ...update, values: [key, 201, TYPE, body.toString()] }));
    }
    default:
      return pool.query({ ...select, values: [replayKeys[i & 63]] });
  }
}

const wal = async () => (await admin.query('SELECT wal_records::float8 AS records, wal_bytes::float8 AS bytes FROM pg_stat_wal')).rows[0];

/** The backend's instruction total over the warm-up and `count` operations, and the WAL they wrote. */
async function backendRun(count) {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const store = createPostgresStore({ pool, schema, listen: false });
  const pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  for (let i = 0; i < WARM; i++) await operation(pool, store, i);
  const before = await wal();
  for (let i = 0; i < count; i++) await operation(pool, store, i);
  const after = await wal();
  await store.close();
  await pool.end();
  const total = await backendInstructions(dir, pid, process.env.BENCH_CALLGRIND_KEEP === '1');
  return { total, walRecords: after.records - before.records, walBytes: after.bytes - before.bytes };
}

const hot = async () =>
  (await admin.query(`SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`, [
    schema,
    row.startsWith('floor') ? 'floor' : 'records',
  ])).rows[0];
const one = await backendRun(ops);
const two = await backendRun(2 * ops);
await sleep(700); // the statistics collector's flush
const updates = await hot();
const isNew = row.endsWith('new');
process.stdout.write(
  `${JSON.stringify({
    row,
    ops,
    backendInstructions: Math.round((two.total - one.total) / ops),
    ...(isNew && {
      walRecords: Number((two.walRecords / (2 * ops)).toFixed(2)),
      walBytes: Math.round(two.walBytes / (2 * ops)),
      hotUpdates: `${updates.hot}/${updates.upd}`,
    }),
  })}\n`,
);
await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
await admin.end();
