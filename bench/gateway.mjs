// The gateway beside a bare reverse proxy on undici (same upstream, no idempotency) and the upstream hit
// directly: requests per second and p50/p99 latency of a closed loop, for new keys and for replays.
//   node --import tsx bench/gateway.mjs [--connections 16] [--seconds 3] [--store sqlite]
// Each server runs in its own process; the load comes from this one. The figures follow the machine's load.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { setTimeout } from 'node:timers';
import { parseArgs } from 'node:util';
import { fetch, Pool } from 'undici';

const { values } = parseArgs({ options: { connections: { type: 'string', default: '16' }, seconds: { type: 'string', default: '3' }, store: { type: 'string', default: 'sqlite' } } });
const CONNECTIONS = Number(values.connections);
const SECONDS = Number(values.seconds);
const ROOT = join(import.meta.dirname, '..');
const BODY = JSON.stringify({ amount: 1250, currency: 'eur', customer: 'cus_123' });

const UPSTREAM = `
const http = require('node:http');
let n = 0;
http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c)).on('end', () => {
    const body = JSON.stringify({ id: ++n, bytes: Buffer.concat(chunks).length });
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
}).listen(Number(process.argv[1]), '127.0.0.1', () => console.log('ready'));`;

const BARE_PROXY = `
const http = require('node:http');
const { Pool } = require('undici');
const pool = new Pool(process.argv[2], { connections: 64 });
http.createServer(async (req, res) => {
  try {
    const answer = await pool.request({ method: req.method, path: req.url, headers: req.headers, body: req });
    res.writeHead(answer.statusCode, answer.headers);
    for await (const chunk of answer.body) res.write(chunk);
    res.end();
  } catch { res.writeHead(502).end(); }
}).listen(Number(process.argv[1]), '127.0.0.1', () => console.log('ready'));`;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function start(command, args, marker) {
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise((resolve, reject) => {
    const onData = (chunk) => chunk.toString().includes(marker) && resolve();
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${command} exited with ${code}`)));
  });
  return child;
}

/** A closed loop of `CONNECTIONS` clients for `SECONDS` after a 1 s warm-up. */
async function load(origin, keyFor) {
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
  counting = true;
  const began = performance.now();
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1_000));
  counting = false;
  const elapsed = performance.now() - began;
  stop = true;
  await Promise.all(workers);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
  return { perSecond: (latencies.length / elapsed) * 1_000, p50: at(0.5), p99: at(0.99), statuses };
}

const dir = await mkdtemp(join(tmpdir(), 'retrysafe-gateway-bench-'));
const children = [];
try {
  const [upstreamPort, barePort, gatewayPort] = await Promise.all([freePort(), freePort(), freePort()]);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  children.push(await start(process.execPath, ['-e', UPSTREAM, String(upstreamPort)], 'ready'));
  children.push(await start(process.execPath, ['-e', BARE_PROXY, String(barePort), upstream], 'ready'));
  const store = values.store === 'sqlite' ? `sqlite:${join(dir, 'gateway.db')}` : values.store;
  const config = join(dir, 'gateway.json');
  await writeFile(config, JSON.stringify({ listen: `127.0.0.1:${gatewayPort}`, store, scope: 'global', accessLog: false, upstreams: { app: { url: upstream } }, routes: [{ path: '/payments', upstream: 'app' }] }));
  children.push(await start(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'gateway', '--config', config], 'listening on'));
  const run = Date.now().toString(36);
  const rows = [
    ['upstream, direct', await load(upstream, () => undefined)],
    ['bare undici proxy', await load(`http://127.0.0.1:${barePort}`, () => undefined)],
    [`gateway (${values.store}), new keys`, await load(`http://127.0.0.1:${gatewayPort}`, (n) => `${run}-new-${n}`)],
  ];
  const replayKeys = 100;
  for (let i = 0; i < replayKeys; i += 1) {
    const answer = await fetch(`http://127.0.0.1:${gatewayPort}/payments`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': `${run}-replay-${i}` }, body: BODY });
    await answer.arrayBuffer();
  }
  rows.push([`gateway (${values.store}), replays`, await load(`http://127.0.0.1:${gatewayPort}`, (n) => `${run}-replay-${n % replayKeys}`)]);
  const bare = rows[1][1];
  process.stdout.write(`| ${CONNECTIONS} connections, ${SECONDS} s | requests/s | × bare proxy | p50 ms | p99 ms | statuses |\n|---|---|---|---|---|---|\n`);
  for (const [name, result] of rows) {
    process.stdout.write(`| ${name} | ${result.perSecond.toFixed(0)} | ${(result.perSecond / bare.perSecond).toFixed(2)} | ${result.p50.toFixed(2)} | ${result.p99.toFixed(2)} | ${JSON.stringify(result.statuses)} |\n`);
  }
} finally {
  for (const child of children) {
    child.kill('SIGTERM');
    if (child.exitCode === null) await once(child, 'exit');
  }
  await rm(dir, { recursive: true, force: true });
}
