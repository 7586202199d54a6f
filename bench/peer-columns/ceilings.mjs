// The performance targets of docs/benchmarks.md beside what retrysafe reached and what the least layer on
// the same store reached, from one peer-benchmark run (its raw.json) that included the ceiling columns:
//
//   node ceilings.mjs <results/<run>/raw.json>
//
// Each cell is the median over the run's rounds, (min–max) in brackets. Ratios between two columns use the
// harness's A B A B pairing: each column's req/s divided by its adjacent reference probes, per round, then
// divided. CPU cells are the server process's µs per request. The PostgreSQL rows divide by the
// `floor-postgres` column (bare Fastify + the raw statements, ./floor-postgres.mjs), so the HTTP server is
// on both sides. "ours ÷ least" is how much of the least layer's figure retrysafe reaches (for CPU: the
// least layer's µs ÷ ours, so above 1 means retrysafe spends less).
import { readFileSync } from 'node:fs';
import process from 'node:process';

const raw = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const rounds = [...new Set(raw.http.map((r) => r.round))].sort((a, b) => a - b);
const get = (id, r) => raw.http.find((x) => x.id === id && x.round === r && !x.error);
const median = (xs) => {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length === 0 ? NaN : v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
const fixed = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');
const cell = (xs, digits = 2) => {
  const v = xs.filter(Number.isFinite);
  return v.length === 0 ? 'n/a' : `${fixed(median(v), digits)} (${fixed(Math.min(...v), digits)}–${fixed(Math.max(...v), digits)})`;
};
const normalised = (id, w, r) => {
  const x = get(id, r);
  return x ? x[w].rps / x.ref.rps : NaN;
};

/** Per-round series of one measure for a column: a ratio to another column, or its CPU. */
const versus = (other) => (id, w) => rounds.map((r) => normalised(id, w, r) / normalised(other, w, r));
const cpu = (id, w) => rounds.map((r) => get(id, r)?.[w].cpuUsPerReq);

const PG_FLOOR = 'floor-postgres'; // bare Fastify + INSERT; UPDATE per new key, one PK SELECT per replay
const rows = [
  ['Redis ÷ node-idempotency-redis', versus('node-idempotency-redis'), ['ours-redis', 'ceiling-redis'], { w1: '≥ 1.25', w2: '≥ 1.4' }],
  ['Redis, server CPU µs per request', cpu, ['ours-redis', 'ceiling-redis'], { w1: '–', w2: '–' }, 0],
  ['memory (Fastify) ÷ bare Fastify', versus('bare-fastify'), ['ours-memory', 'ceiling-memory'], { w1: '≥ 0.70', w2: '≥ 0.90' }],
  ['memory (Fastify), server CPU µs per request', cpu, ['ours-memory', 'ceiling-memory'], { w1: '–', w2: '–' }, 0],
  ['memory (Fastify) ÷ node-idempotency-memory', versus('node-idempotency-memory'), ['ours-memory', 'ceiling-memory'], { w1: '≥ 1.3', w2: '≥ 1.5' }],
  ['memory (Express) ÷ bare Express', versus('bare-express'), ['ours-memory-express', 'ceiling-memory-express'], { w1: '≥ 0.85', w2: '≥ 1.0' }],
  ['SQLite ÷ bare Fastify', versus('bare-fastify'), ['ours-sqlite', 'ceiling-sqlite'], { w1: '≥ 0.60', w2: '≥ 0.55' }],
  ['PostgreSQL ÷ bare Fastify + the raw statements', versus(PG_FLOOR), ['ours-postgres', 'ceiling-postgres-claim-first'], { w1: '≥ 0.90', w2: '≥ 0.90' }],
];
const out = ['| measure | workload | target | retrysafe | least layer | retrysafe ÷ least layer |', '|---|---|---|---:|---:|---:|'];
for (const [label, series, [ours, least], targets, digits = 2] of rows) {
  for (const [w, target] of Object.entries(targets)) {
    const a = series(ours, w);
    const b = series(least, w);
    const share = rounds.map((_, i) => (series === cpu ? b[i] / a[i] : a[i] / b[i]));
    out.push(`| ${label} | ${w === 'w1' ? 'new keys' : 'replays'} | ${target} | ${cell(a, digits)} | ${cell(b, digits)} | ${cell(share)} |`);
  }
}
// Transactional ÷ plain, each side within its own kind of layer.
const tx = (txId, plainId) => rounds.map((r) => normalised(txId, 'w1', r) / normalised(plainId, 'w1', r));
const ours = tx('ours-postgres-tx', 'ours-postgres');
const least = tx('ceiling-postgres-tx', 'ceiling-postgres-claim-first');
out.push(`| PostgreSQL transactional ÷ plain | new keys | ≥ 0.85 | ${cell(ours)} | ${cell(least)} | ${cell(ours.map((x, i) => x / least[i]))} |`);
if (raw.http.some((x) => x.id === 'ours-postgres-tx-locked')) {
  const locked = tx('ours-postgres-tx-locked', 'ours-postgres');
  out.push(`| PostgreSQL transactional, \`transactionalClaim: 'locked'\`, ÷ plain | new keys | ≥ 0.85 | ${cell(locked)} | ${cell(least)} | ${cell(locked.map((x, i) => x / least[i]))} |`);
}
// The replay cache's own columns, when the run has them (the targets are read with it off, above).
const cached = [
  ['SQLite ÷ bare Fastify', versus('bare-fastify'), 'ours-sqlite-replay-cache', 'ours-sqlite'],
  ['PostgreSQL ÷ bare Fastify + PK SELECT', versus(PG_FLOOR), 'ours-postgres-replay-cache', 'ours-postgres'],
  ['Redis ÷ node-idempotency-redis', versus('node-idempotency-redis'), 'ours-redis-replay-cache', 'ours-redis'],
  ['Redis ÷ powertools-redis-lru', versus('powertools-redis-lru'), 'ours-redis-replay-cache', 'ours-redis'],
].filter(([, , id]) => raw.http.some((x) => x.id === id));
if (cached.length > 0) {
  out.push('', '| replays, replay cache on (its own columns) | with the cache | without (same run) |', '|---|---:|---:|');
  for (const [label, series, withCache, without] of cached) out.push(`| ${label} | ${cell(series(withCache, 'w2'))} | ${cell(series(without, 'w2'))} |`);
}
const executions = raw.http.filter((x) => x.id.startsWith('ours-') && !x.error);
const double = executions.reduce((n, x) => n + x.w3.doubleExecutedKeys, 0);
out.push('', `W3 double executions over retrysafe's columns and rounds: ${double}; rounds: ${rounds.length}; errors: ${JSON.stringify(raw.http.filter((x) => x.error).map((x) => [x.id, x.round, x.error]))}`);
process.stdout.write(`${out.join('\n')}\n`);
