// What the gateway benches share: the upstream, the bare undici reverse proxy the gateway is compared with,
// and the gateway's configuration. Each runs in its own process (`node -e <script> <port> …`).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import process from 'node:process';

export const ROOT = join(import.meta.dirname, '..');

/** A POST body of the size the other HTTP benches send. */
export const BODY = JSON.stringify({ amount: 1250, currency: 'eur', customer: 'cus_123' });

/** The upstream: answers each request with 201 and a small JSON body naming its count and the body's length. */
export const UPSTREAM = `
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

/** The bare reverse proxy: undici, the same pool size, no idempotency, no header rewriting. */
export const BARE_PROXY = `
const http = require('node:http');
const { Pool } = require('undici');
const pool = new Pool(process.argv[2], { connections: 64 });
http.createServer({ keepAliveTimeout: 5000 }, async (req, res) => {
  try {
    const answer = await pool.request({ method: req.method, path: req.url, headers: req.headers, body: req });
    res.writeHead(answer.statusCode, answer.headers);
    for await (const chunk of answer.body) res.write(chunk);
    res.end();
  } catch { res.writeHead(502).end(); }
}).listen(Number(process.argv[1]), '127.0.0.1', () => console.log('ready'));`;

/** A free TCP port on loopback. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Spawns `command args` and resolves with the child once a line of its output contains `marker` (lines
 * of valgrind's own, `==pid==`, which echo the command, do not count).
 */
export async function start(command, args, marker) {
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise((done) => child.once('exit', done));
  await new Promise((resolve, reject) => {
    const onData = (chunk) => chunk.toString().split('\n').some((line) => !line.startsWith('==') && line.includes(marker)) && resolve();
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${command} ${args.slice(0, 3).join(' ')} exited with ${code}`)));
  });
  return { child, exited };
}

/**
 * The compiled gateway command (`dist/cli/main.js`, built by `npm run build`): plain JavaScript, as the
 * installed `retrysafe gateway` runs, rather than TypeScript through a loader. `GATEWAY_SCRIPT=<file>`
 * runs another build instead (an older one, to compare). Exits the process with a hint when it has not
 * been built.
 */
export function gatewayScript() {
  const script = process.env.GATEWAY_SCRIPT ?? join(ROOT, 'dist', 'cli', 'main.js');
  if (!existsSync(script)) {
    process.stderr.write(`${script} is missing: build it with npm run build\n`);
    process.exit(2);
  }
  return script;
}

/** Writes the gateway's configuration to `file`: one route, POST /payments, to `upstream`, scope global, no access log. */
export function writeGatewayConfig(file, port, store, upstream) {
  return writeFile(file, JSON.stringify({ listen: `127.0.0.1:${port}`, store, scope: 'global', accessLog: false, upstreams: { app: { url: upstream } }, routes: [{ path: '/payments', upstream: 'app' }] }));
}
