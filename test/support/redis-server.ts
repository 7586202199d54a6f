/**
 * A private `redis-server` for one test file, on a free loopback port, with the settings the test needs
 * (`--maxmemory`, `--maxmemory-policy`, a renamed `CONFIG` …), in a temp dir of its own; `stop()` kills it
 * and removes the dir. Resolves `undefined` when `redis-server` is missing outside CI (with CI=true a
 * missing binary fails the run, as a missing service does).
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { freePort, serviceAvailable } from './services.js';

/** The drivers the Redis store takes, for suites that run once per driver. */
export const REDIS_DRIVERS = ['ioredis', 'node-redis'] as const;

/**
 * A node-redis client to `url`, connected, failing fast as the ioredis test clients do (no offline
 * queue); its connection errors reach the commands that fail on them.
 */
export async function connectNodeRedis(url: string) {
  const client = createClient({ url, disableOfflineQueue: true });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** A node-redis client (`createClient()` of `redis`, RESP3 as its default). */
export type NodeRedis = Awaited<ReturnType<typeof connectNodeRedis>>;

const run = promisify(execFile);

/** A running private server. */
export interface PrivateRedis {
  readonly port: number;
  /** A new connection to it (fails fast: no offline queue); closed by `stop()` too. */
  connect(): Promise<Redis>;
  /** A new node-redis client to it (fails fast: no offline queue); closed by `stop()` too. */
  connectNodeRedis(): Promise<NodeRedis>;
  stop(): Promise<void>;
}

export async function startPrivateRedis(settings: readonly string[]): Promise<PrivateRedis | undefined> {
  if (!(await serviceAvailable('redis-server (private server)', () => run('redis-server', ['--version'])))) return undefined;
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-redis-'));
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...settings], {
    stdio: 'ignore',
  });
  const connections: { disconnect(): unknown }[] = [];
  const connect = async (): Promise<Redis> => {
    const client = new Redis(port, '127.0.0.1', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    connections.push(client);
    await client.connect();
    return client;
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis(port, '127.0.0.1', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    const up = await probe.connect().then(
      () => true,
      () => false,
    );
    probe.disconnect();
    if (up) break;
    if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer within 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    port,
    connect,
    async connectNodeRedis() {
      const client = await connectNodeRedis(`redis://127.0.0.1:${port}`);
      connections.push({ disconnect: () => client.destroy() });
      return client;
    },
    async stop() {
      for (const client of connections) client.disconnect();
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Calls per command since the last reset, from `INFO commandstats` (`set`, `evalsha`, `time` …), scripts' own commands included. */
export async function commandCalls(client: Redis): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const [, name, count] of (await client.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[name ?? ''] = Number(count);
  return calls;
}
