// Instructions a PostgreSQL backend spends per new key and per replay for other shapes of the claim's first
// step than the store's `read_or_insert()`, and for other index layouts of the records table: the
// measurements behind docs/hot-path.md's "PostgreSQL claim columns" and "PostgreSQL completion". Each
// operation runs the shape's statements as named (prepared) statements on one connection, then, for a new
// key, the store's own `complete`; the counting is `pg-backend-instructions.mjs`'s (the server under
// callgrind, the difference of two runs of `ops` and twice `ops` operations, WAL from `pg_stat_wal`):
//
//   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:<port>/<db> BENCH_CALLGRIND_DIR=<dir> \
//     node bench/pg-claim-shapes.mjs <checkout with a built dist/> <shape> <new|replay> [ops] [layout]
//
// Shapes: read-or-insert (the store's: read, insert when none), insert-first (PL/pgSQL: insert, read when
// it met a record), plain-insert (`INSERT … ON CONFLICT DO NOTHING RETURNING`, then `read_or_insert()`
// when it returned nothing: two round trips for a replay), sql-read (the read in the calling statement,
// the insert in a PL/pgSQL function called only on a miss), sql-read-sql-insert (the same, the insert in
// a SQL-language function), sql-function (read and insert in one SQL-language function, a CTE).
// Layouts: migrated (as the migrations leave it), no-secondary-indexes (no reaper and no abandoned-claim
// index: the most a HOT completion could save), unchanged-columns (the reaper's index on `created_at`, the
// abandoned-claim index over `recovery_point IS NOT NULL`: columns the completion leaves, so it is HOT).
// ops: 2,000.
import { Buffer } from 'node:buffer';
import { backendInstructions } from './pg-backends.mjs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const [rootArg = '.', shape = 'read-or-insert', row = 'new', opsArg = '2000', layout = 'migrated'] = process.argv.slice(2);
const root = resolve(rootArg);
const url = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const dir = process.env.BENCH_CALLGRIND_DIR;
const req = createRequire(join(root, 'package.json'));
const pg = req('pg');
const { migrate } = await import(pathToFileURL(join(root, 'dist', 'postgres.js')).href);
const { statements } = await import(pathToFileURL(join(root, 'dist', 'stores', 'postgres', 'statements.js')).href);
const { schemaNames } = await import(pathToFileURL(join(root, 'dist', 'stores', 'postgres', 'schema.js')).href);
const ops = Number(opsArg);
const WARM = 500;
const schema = `bench_pgshapes_${process.pid}`;
const s = `"${schema}"`;
const FP = Buffer.from('f'.repeat(64), 'hex');
const RETENTION = 86_400_000;
const body = Buffer.from(JSON.stringify({ id: 'pay_1234', amount: 1000 }));
const headers = JSON.stringify({ 'content-type': 'application/json; charset=utf-8' });
const now = (p) => `COALESCE(${p}::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)`;
const columns = '(scope, key, fingerprint, lease_token, lease_expires_at, created_at, expires_at)';
const args = 'p_scope text, p_key text, p_fingerprint bytea, p_lease_token bytea, p_now bigint, p_lease_ms bigint, p_retention_ms bigint';
const values = 'VALUES (p_scope, p_key, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now, p_now + p_retention_ms)';
/** `read_or_insert()`'s array for a standing record `r`, at `ms`, the fingerprint `fp` and the owner token `token`. */
const standing = (r, ms, fp, token) => `json_build_array(false,
    ${r}.expires_at > ${ms} AND NOT (${r}.completed_at IS NULL AND ${r}.fingerprint = ${fp} AND (${r}.lease_expires_at <= ${ms} OR ${r}.lease_token = ${token})),
    ${r}.lease_expires_at, encode(${r}.fingerprint, 'hex'), encode(${r}.lease_token, 'hex'),
    ${r}.created_at, ${r}.expires_at, ${r}.completed_at, ${r}.status, ${r}.headers, ${r}.recovery_point, encode(${r}.body, 'base64'))`;
const readOrInsert = `SELECT ${s}.read_or_insert($1, $2, $3, $4, ${now('$5')}, $6, $7) AS head`;
const sqlRead = `SELECT COALESCE((SELECT ${standing('r', 'c.ms', '$3', '$4')} FROM ${s}.records AS r WHERE r.scope = $1 AND r.key = $2),
      ${s}.insert_claim($1, $2, $3, $4, c.ms, $6, $7)) AS head
    FROM (SELECT ${now('$5')} AS ms) AS c`;
const plpgsqlInsert = `CREATE FUNCTION ${s}.insert_claim(${args}) RETURNS json LANGUAGE plpgsql AS $$
DECLARE v_fence bigint;
BEGIN
  INSERT INTO ${s}.records AS t ${columns} ${values} ON CONFLICT (scope, key) DO NOTHING RETURNING t.fence INTO v_fence;
  IF FOUND THEN RETURN json_build_array(true, p_now + p_lease_ms, v_fence::text); END IF;
  RETURN NULL;
END $$`;

/** Per shape: the functions it adds, its first statement, and the statement it runs when the first returned nothing. */
const SHAPES = {
  'read-or-insert': { ddl: '', first: readOrInsert },
  'insert-first': {
    ddl: `CREATE FUNCTION ${s}.insert_first(${args}) RETURNS json LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE r ${s}.records%ROWTYPE; v_fence bigint;
BEGIN
  INSERT INTO ${s}.records AS t ${columns} ${values} ON CONFLICT (scope, key) DO NOTHING RETURNING t.fence INTO v_fence;
  IF FOUND THEN RETURN json_build_array(true, p_now + p_lease_ms, v_fence::text); END IF;
  SELECT * INTO r FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key;
  IF NOT FOUND THEN RETURN NULL; END IF;
  RETURN ${standing('r', 'p_now', 'p_fingerprint', 'p_lease_token')};
END $$`,
    first: `SELECT ${s}.insert_first($1, $2, $3, $4, ${now('$5')}, $6, $7) AS head`,
  },
  'plain-insert': {
    ddl: '',
    first: `INSERT INTO ${s}.records ${columns}
      SELECT $1, $2, $3, $4, c.ms + $6::bigint, c.ms, c.ms + $7::bigint FROM (SELECT ${now('$5')} AS ms) AS c
      ON CONFLICT (scope, key) DO NOTHING RETURNING json_build_array(true, lease_expires_at, fence::text) AS head`,
    fallback: readOrInsert,
  },
  'sql-read': { ddl: plpgsqlInsert, first: sqlRead },
  'sql-read-sql-insert': {
    ddl: `CREATE FUNCTION ${s}.insert_claim(${args}) RETURNS json LANGUAGE sql AS $$
  INSERT INTO ${s}.records AS t ${columns} ${values}
  ON CONFLICT (scope, key) DO NOTHING RETURNING json_build_array(true, t.lease_expires_at, t.fence::text)
$$`,
    first: sqlRead,
  },
  'sql-function': {
    ddl: `CREATE FUNCTION ${s}.read_or_insert_sql(${args}) RETURNS json LANGUAGE sql AS $$
  WITH r AS (SELECT * FROM ${s}.records AS t WHERE t.scope = p_scope AND t.key = p_key),
  ins AS (INSERT INTO ${s}.records AS t ${columns}
    SELECT p_scope, p_key, p_fingerprint, p_lease_token, p_now + p_lease_ms, p_now, p_now + p_retention_ms WHERE NOT EXISTS (SELECT FROM r)
    ON CONFLICT (scope, key) DO NOTHING RETURNING t.fence)
  SELECT json_build_array(true, p_now + p_lease_ms, fence::text) FROM ins
  UNION ALL
  SELECT ${standing('r', 'p_now', 'p_fingerprint', 'p_lease_token')} FROM r
$$`,
    first: `SELECT ${s}.read_or_insert_sql($1, $2, $3, $4, ${now('$5')}, $6, $7) AS head`,
  },
};
const LAYOUTS = {
  migrated: '',
  'no-secondary-indexes': `DROP INDEX ${s}.records_expires_at_idx; DROP INDEX ${s}.records_abandoned_idx`,
  'unchanged-columns': `DROP INDEX ${s}.records_expires_at_idx; DROP INDEX ${s}.records_abandoned_idx;
    CREATE INDEX records_reap_idx ON ${s}.records (created_at);
    CREATE INDEX records_abandoned_idx ON ${s}.records (lease_expires_at) WHERE recovery_point IS NOT NULL`,
};
const chosen = SHAPES[shape];
if (dir === undefined || chosen === undefined || !['new', 'replay'].includes(row) || LAYOUTS[layout] === undefined) {
  process.stderr.write(
    `usage: BENCH_CALLGRIND_DIR=<dir> node bench/pg-claim-shapes.mjs <root> <${Object.keys(SHAPES).join('|')}> <new|replay> [ops] [${Object.keys(LAYOUTS).join('|')}]\n`,
  );
  process.exit(2);
}

const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
await migrate({ pool: admin, schema });
if (chosen.ddl !== '') await admin.query(chosen.ddl);
if (LAYOUTS[layout] !== '') await admin.query(LAYOUTS[layout]);
const first = { name: 'shape_first', text: chosen.first };
const fallback = chosen.fallback && { name: 'shape_fallback', text: chosen.fallback };
const complete = statements(schemaNames('schema', schema), true).complete;
let roundTrips = 0;

/** The claim's head (`read_or_insert()`'s array) for `key` under the owner token `token`. */
async function claim(pool, key, token) {
  const claimValues = ['bench', key, FP, token, null, 60_000, RETENTION];
  roundTrips++;
  const head = (await pool.query({ ...first, values: claimValues })).rows[0]?.head ?? null;
  if (head !== null || fallback === undefined) return head;
  roundTrips++;
  return (await pool.query({ ...fallback, values: claimValues })).rows[0]?.head ?? null;
}
async function completeKey(pool, key, token) {
  roundTrips++;
  const result = await pool.query({ name: complete.name, text: complete.text, values: ['bench', key, token, null, RETENTION, 201, headers, body, 'topic'] });
  if (result.rowCount !== 1) throw new Error(`${key} was not completed`);
}
const replayKeys = Array.from({ length: 64 }, (_, i) => `replay-${i}`);
for (const key of replayKeys) {
  if ((await claim(admin, key, Buffer.from(key)))?.[0] !== true) throw new Error(`${key} was not claimed`);
  await completeKey(admin, key, Buffer.from(key));
}
let fresh = 0;
async function operation(pool, i) {
  if (row === 'new') {
    const key = `new-${fresh++}`;
    const head = await claim(pool, key, Buffer.from(key));
    if (head?.[0] !== true) throw new Error(`new key ${key}: ${JSON.stringify(head)}`);
    return completeKey(pool, key, Buffer.from(key));
  }
  const head = await claim(pool, replayKeys[i & 63], Buffer.from('other'));
  if (head?.[0] !== false || head[1] !== true) throw new Error(`replay: ${JSON.stringify(head)}`);
}
const wal = async () => (await admin.query('SELECT wal_records::float8 AS records, wal_bytes::float8 AS bytes FROM pg_stat_wal')).rows[0];

/** The backend's instruction total over the warm-up and `count` operations, their round trips and the WAL they wrote. */
async function backendRun(count) {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  for (let i = 0; i < WARM; i++) await operation(pool, i);
  const before = await wal();
  roundTrips = 0;
  for (let i = 0; i < count; i++) await operation(pool, i);
  const trips = roundTrips;
  const after = await wal();
  await pool.end();
  const total = await backendInstructions(dir, pid);
  return { total, trips, walRecords: after.records - before.records, walBytes: after.bytes - before.bytes };
}

const one = await backendRun(ops);
const two = await backendRun(2 * ops);
await sleep(700); // the statistics collector's flush
const updates = (await admin.query(`SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'records'`, [schema])).rows[0];
process.stdout.write(
  `${JSON.stringify({
    shape,
    row,
    layout,
    ops,
    backendInstructions: Math.round((two.total - one.total) / ops),
    roundTrips: two.trips / (2 * ops),
    ...(row === 'new' && {
      walRecords: Number((two.walRecords / (2 * ops)).toFixed(2)),
      walBytes: Math.round(two.walBytes / (2 * ops)),
      hotUpdates: `${updates.hot}/${updates.upd}`,
    }),
  })}\n`,
);
await admin.query(`DROP SCHEMA ${s} CASCADE`);
await admin.end();
