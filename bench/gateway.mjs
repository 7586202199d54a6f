// The gateway beside a bare reverse proxy on undici (same upstream, no idempotency) and the upstream hit
// directly: requests per second and p50/p99 latency of a closed loop, for new keys and for replays, and
// the CPU time per request of each process (the server under test, the upstream, this load generator).
//   npm run build && node bench/gateway.mjs [--connections 16] [--seconds 3] [--rounds 3] [--store sqlite]
//
// Method: each server runs in its own process, the load comes from this one. The gateway is the compiled
// command (`dist/cli/main.js`), as installed, so both proxies run plain JavaScript. The rows are measured
// in rounds, alternating (bare proxy, gateway new keys, gateway replays in each round), so a change of the
// machine's load falls on all of them alike; each row prints the median of its rounds and their range.
// Each load runs 1 s of warm-up before its `--seconds` of counting. CPU per request is user + system time
// (`/proc/<pid>/stat`) over the counted window, divided by the requests answered in it: it moves far
// less with the machine's load than requests per second do.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { setTimeout } from 'node:timers';
import { parseArgs } from 'node:util';
import { fetch, Pool } from 'undici';
import { BARE_PROXY, BODY, freePort, gatewayScript, start, UPSTREAM, writeGatewayConfig } from './gateway-servers.mjs';

const { values } = parseArgs({
  options: { connections: { type: 'string', default: '16' }, seconds: { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' }, store: { type: 'string', default: 'sqlite' } },
});
const CONNECTIONS = Number(values.connections);
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
/** Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux). */
const TICKS = 100;

/** User + system CPU time of process `pid` so far, in µs. */
function cpuOf(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
  return ((Number(fields[11]) + Number(fields[12])) / TICKS) * 1e6;
}

/** This process's user + system CPU time so far, in µs. */
function ownCpu() {
  const { user, system } = process.cpuUsage();
  return user + system;
}

/**
 * A closed loop of `CONNECTIONS` clients for `SECONDS` after a 1 s warm-up; CPU per request of `server`
 * and `upstream` (pids; `upstream` undefined when the server answers alone) and of this process.
 */
async function load(origin, keyFor, server, upstream) {
  const pool = new Pool(origin, { connections: CONNECTIONS });
  const latencies = [];
  let n = 0;
  let counting = false;
  let stop = false;
  const statuses = {};
  const worker = async () => {
    while (!stop) {
      const key = keyFor(n++);
      const started = performance.now();
      const answer = await pool.request({ method: 'POST', path: '/payments', headers: { 'content-type': 'application/json', ...(key && { 'idempotency-key': key }) }, body: BODY });
      await answer.body.dump();
      if (counting) {
        latencies.push(performance.now() - started);
        statuses[answer.statusCode] = (statuses[answer.statusCode] ?? 0) + 1;
      }
    }
  };
  const workers = Array.from({ length: CONNECTIONS }, worker);
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const cpu = () => [cpuOf(server), upstream === undefined ? 0 : cpuOf(upstream), ownCpu()];
  const before = cpu();
  counting = true;
  const began = performance.now();
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1_000));
  counting = false;
  const elapsed = performance.now() - began;
  const after = cpu();
  stop = true;
  await Promise.all(workers);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
  const perRequest = after.map((value, i) => (value - before[i]) / latencies.length);
  return { perSecond: (latencies.length / elapsed) * 1_000, p50: at(0.5), p99: at(0.99), statuses, serverUs: perRequest[0], upstreamUs: perRequest[1], loadUs: perRequest[2] };
}

function median(numbers) {
  const sorted = [...numbers].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

const dir = await mkdtemp(join(tmpdir(), 'retrysafe-gateway-bench-'));
const children = [];
try {
  const [upstreamPort, barePort, gatewayPort] = await Promise.all([freePort(), freePort(), freePort()]);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const upstreamChild = await start(process.execPath, ['-e', UPSTREAM, String(upstreamPort)], 'ready');
  children.push(upstreamChild);
  const bareChild = await start(process.execPath, ['-e', BARE_PROXY, String(barePort), upstream], 'ready');
  children.push(bareChild);
  const store = values.store === 'sqlite' ? `sqlite:${join(dir, 'gateway.db')}` : values.store;
  const config = join(dir, 'gateway.json');
  await writeGatewayConfig(config, gatewayPort, store, upstream);
  const gatewayChild = await start(process.execPath, [gatewayScript(), 'gateway', '--config', config], 'listening on');
  children.push(gatewayChild);
  const [upstreamPid, barePid, gatewayPid] = [upstreamChild, bareChild, gatewayChild].map(({ child }) => child.pid);
  const run = Date.now().toString(36);
  const replayKeys = 100;
  for (let i = 0; i < replayKeys; i += 1) {
    const answer = await fetch(`http://127.0.0.1:${gatewayPort}/payments`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': `${run}-replay-${i}` }, body: BODY });
    await answer.arrayBuffer();
  }
  const names = ['upstream, direct', 'bare undici proxy', `gateway (${values.store}), new keys`, `gateway (${values.store}), replays`];
  const results = names.map(() => []);
  results[0].push(await load(upstream, () => undefined, upstreamPid, undefined));
  let fresh = 0;
  for (let round = 0; round < ROUNDS; round += 1) {
    results[1].push(await load(`http://127.0.0.1:${barePort}`, () => undefined, barePid, upstreamPid));
    results[2].push(await load(`http://127.0.0.1:${gatewayPort}`, () => `${run}-new-${fresh++}`, gatewayPid, upstreamPid));
    results[3].push(await load(`http://127.0.0.1:${gatewayPort}`, (n) => `${run}-replay-${n % replayKeys}`, gatewayPid, upstreamPid));
  }
  // Ratios and added latency are taken within each round, against that round's bare proxy.
  const bareOf = (round) => results[1][round];
  const bareMedian = median(results[1].map((r) => r.perSecond));
  const range = (rows, pick, digits) => {
    const picked = rows.map((row, round) => pick(row, round));
    const text = (value) => value.toFixed(digits);
    return rows.length === 1 ? text(picked[0]) : `${text(median(picked))} (${text(Math.min(...picked))}–${text(Math.max(...picked))})`;
  };
  process.stdout.write(
    `| ${CONNECTIONS} connections, ${SECONDS} s, ${ROUNDS} rounds | requests/s | × bare proxy | p50 ms | p50 − bare p50 ms | p99 ms | server CPU µs/request | upstream CPU µs/request | load CPU µs/request | statuses |\n` +
      '|---|---|---|---|---|---|---|---|---|---|\n',
  );
  names.forEach((name, i) => {
    const rows = results[i];
    const statuses = {};
    for (const row of rows) for (const [status, count] of Object.entries(row.statuses)) statuses[status] = (statuses[status] ?? 0) + count;
    const cells = [
      range(rows, (r) => r.perSecond, 0),
      range(rows, (r, round) => r.perSecond / (i === 0 ? bareMedian : bareOf(round).perSecond), 2),
      range(rows, (r) => r.p50, 2),
      i < 2 ? '' : range(rows, (r, round) => r.p50 - bareOf(round).p50, 2),
      range(rows, (r) => r.p99, 2),
      range(rows, (r) => r.serverUs, 0),
      i === 0 ? '' : range(rows, (r) => r.upstreamUs, 0),
      range(rows, (r) => r.loadUs, 0),
      JSON.stringify(statuses),
    ];
    process.stdout.write(`| ${name} | ${cells.join(' | ')} |\n`);
  });
} finally {
  for (const { child, exited } of children) {
    child.kill('SIGTERM');
    if (child.exitCode === null) await exited;
  }
  await rm(dir, { recursive: true, force: true });
}
