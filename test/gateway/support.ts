/**
 * What the gateway tests share: the real non-Node upstreams (Python's `http.server`, a Go binary built
 * here with the standard library only), each counting its executions in its own SQLite database or file;
 * configuration files; the gateway in process or as a `retrysafe gateway` child process; a request helper.
 * A missing `python3` or `go` skips the suite locally and fails it in CI (see `test/support/services.ts`).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { request as undiciRequest, type Dispatcher } from 'undici';
import { stringify } from 'yaml';
import { loadConfig } from '../../src/gateway/config.js';
import { startGateway, type Gateway } from '../../src/gateway/server.js';
import { freePort, serviceAvailable } from '../support/services.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const UPSTREAMS = fileURLToPath(new URL('./upstreams/', import.meta.url));

/** Whether `python3` runs (see `serviceAvailable`). */
export function pythonAvailable(): Promise<boolean> {
  return serviceAvailable('python3', () => run('python3', ['--version']));
}

/** Whether `go` runs (see `serviceAvailable`). */
export function goAvailable(): Promise<boolean> {
  return serviceAvailable('go', () => run('go', ['version']));
}

/** A temporary directory, removed by the returned function. */
export async function workDir(): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-gateway-test-'));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** A started upstream process. */
export interface UpstreamProcess {
  readonly url: string;
  /** How many times the upstream executed `key` (every key when omitted). */
  executions(key?: string): Promise<number>;
  /** Executions per key. */
  perKey(): Promise<Map<string, number>>;
  stop(): Promise<void>;
}

async function startProcess(command: string, args: readonly string[], port: number): Promise<ChildProcess> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} did not start on port ${port}`)), 15_000);
    child.once('exit', (code) => reject(new Error(`${command} exited with ${code}`)));
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return child;
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGKILL');
  await once(child, 'exit');
}

/** Starts the Python upstream on a free port, with its database in `dir`. */
export async function startPython(dir: string, port?: number): Promise<UpstreamProcess> {
  const at = port ?? (await freePort());
  const database = join(dir, `python-${at}.db`);
  const child = await startProcess('python3', [join(UPSTREAMS, 'upstream.py'), String(at), database], at);
  const perKey = (): Promise<Map<string, number>> => {
    const db = new Database(database, { readonly: true });
    try {
      const rows = db.prepare('SELECT key, COUNT(*) AS n FROM executions GROUP BY key').all() as { key: string; n: number }[];
      return Promise.resolve(new Map(rows.map((row) => [row.key, row.n])));
    } finally {
      db.close();
    }
  };
  return {
    url: `http://127.0.0.1:${at}`,
    perKey,
    executions: async (key) => [...(await perKey()).entries()].reduce((sum, [name, n]) => (key === undefined || name === key ? sum + n : sum), 0),
    stop: () => stopProcess(child),
  };
}

/** Builds the Go upstream into `dir` (module-free, standard library only; caches in `dir`). */
export async function buildGo(dir: string): Promise<string> {
  const binary = join(dir, 'upstream-go');
  await run('go', ['build', '-o', binary, join(UPSTREAMS, 'upstream.go')], {
    env: { ...process.env, GOCACHE: join(dir, 'gocache'), GOPATH: join(dir, 'gopath'), GO111MODULE: 'off', GOFLAGS: '', GOTOOLCHAIN: 'local' },
  });
  return binary;
}

/** Starts the Go upstream binary on a free port, with its executions file in `dir`. */
export async function startGo(binary: string, dir: string): Promise<UpstreamProcess> {
  const at = await freePort();
  const file = join(dir, `go-${at}.log`);
  const child = await startProcess(binary, [String(at), file], at);
  const perKey = async (): Promise<Map<string, number>> => {
    const counts = new Map<string, number>();
    for (const line of (await readFile(file, 'utf8')).split('\n')) if (line !== '') counts.set(line, (counts.get(line) ?? 0) + 1);
    return counts;
  };
  return {
    url: `http://127.0.0.1:${at}`,
    perKey,
    executions: async (key) => [...(await perKey()).entries()].reduce((sum, [name, n]) => (key === undefined || name === key ? sum + n : sum), 0),
    stop: () => stopProcess(child),
  };
}

/** Resolves once `upstream` has executed `key` (the request reached it), polling; throws after 10 s. */
export async function executed(upstream: UpstreamProcess, key: string): Promise<void> {
  for (let i = 0; i < 200; i += 1) {
    if ((await upstream.executions(key)) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the upstream never executed ${key}`);
}

/**
 * Resolves once the Python upstream holds a request of `key` (sent with `x-fault: sleep=held` or
 * `hang=held`): it has reached the upstream and is not answered until {@link release}; throws after 10 s.
 */
export async function held(upstream: UpstreamProcess, key: string): Promise<void> {
  for (let i = 0; i < 200; i += 1) {
    const reply = (await (await fetch(`${upstream.url}/held?key=${encodeURIComponent(key)}`)).json()) as { held: number };
    if (reply.held > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the upstream never held ${key}`);
}

/** Ends every hold of `key` on the Python upstream, now and to come: those requests go on as their fault says. */
export async function release(upstream: UpstreamProcess, key: string): Promise<void> {
  const response = await fetch(`${upstream.url}/release?key=${encodeURIComponent(key)}`, { method: 'POST' });
  if (response.status !== 200) throw new Error(`the upstream did not release ${key}: ${response.status}`);
}

/** Writes `config` as YAML into `dir` and returns its path. */
export async function writeConfig(dir: string, config: object, name = 'gateway.yaml'): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, stringify(config));
  return path;
}

/** The gateway in this process, from the configuration file at `path` (no file watch, no access log). */
export async function gatewayInProcess(path: string, log: (line: string) => void = () => undefined): Promise<Gateway & { url: string }> {
  const gateway = await startGateway(await loadConfig(path), { log, watchFile: false, onReload: () => undefined });
  const address = gateway.addresses[0];
  if (address === undefined) throw new Error('no listener');
  return Object.assign(gateway, { url: `http://127.0.0.1:${address.port}` });
}

/** A `retrysafe gateway` child process. */
export interface GatewayProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** Runs `retrysafe gateway --config path` as a child process listening on `port`; resolves once it listens. */
export async function gatewayProcess(path: string, port: number): Promise<GatewayProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'gateway', '--config', path], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start: ${stderr}`)), 30_000);
    child.once('exit', (code) => reject(new Error(`the gateway exited with ${code}: ${stderr}`)));
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes('listening on')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return {
    child,
    url: `http://127.0.0.1:${port}`,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      await once(child, 'exit');
    },
  };
}

/** A response read whole. */
export interface Answer {
  readonly status: number;
  readonly headers: Dispatcher.ResponseData['headers'];
  readonly body: Buffer;
  json(): Record<string, unknown>;
}

/** Sends one request and reads the whole response. */
export async function send(
  url: string,
  options: { method?: string; key?: string; body?: string | Buffer; headers?: Record<string, string>; dispatcher?: Dispatcher } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
  if (options.key !== undefined) headers['idempotency-key'] = options.key;
  const response = await undiciRequest(url, {
    method: (options.method ?? 'POST'),
    headers,
    body: options.body ?? '{}',
    ...(options.dispatcher !== undefined && { dispatcher: options.dispatcher }),
  });
  const body = Buffer.from(await response.body.arrayBuffer());
  return { status: response.statusCode, headers: response.headers, body, json: () => JSON.parse(body.toString()) as Record<string, unknown> };
}

/** A route block for a configuration, with test-friendly defaults. */
export function route(upstream: string, path: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { path, upstream, ...extra };
}
