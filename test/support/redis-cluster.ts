/**
 * A real local Redis Cluster for one test file: 3 masters and 3 replicas (`redis-server --cluster-enabled
 * yes` on free ports, joined by `redis-cli --cluster create … --cluster-replicas 1`), in a temp dir of its
 * own, stopped and removed by `stop()`. A short `cluster-node-timeout` keeps a failover within seconds.
 *
 * Each run writes its server pids under `<tmpdir>/retrysafe-redis-cluster/<test process pid>/`; the next
 * start kills and removes the leftovers of any run whose test process is gone (a crashed or killed run), so
 * nothing piles up and no port stays taken.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { serviceAvailable } from './services.js';

const run = promisify(execFile);
/** A one-shot probe connection: no retries, no queue. */
const PROBE = { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null };
const ROOT = join(tmpdir(), 'retrysafe-redis-cluster');
/**
 * Node ports are drawn from [FIRST_PORT, FIRST_PORT + PORT_SPAN), so a node's port and its cluster bus port
 * (port + 10000) both stay below Linux's default ephemeral range (32768–60999, `net.ipv4.ip_local_port_range`):
 * no outgoing connection on the machine takes either while a killed node is down, and its restart on the
 * same ports (its `nodes.conf` names them) finds them free.
 */
const FIRST_PORT = 10_000;
const PORT_SPAN = 12_768;
/** Milliseconds without an answer before the cluster deems a node failed and promotes its replica. */
export const NODE_TIMEOUT_MS = 1_000;

/** One `redis-server` of the cluster. */
export interface ClusterNode {
  readonly port: number;
  process: ChildProcess;
}

/** A running cluster. */
export interface LocalRedisCluster {
  readonly nodes: readonly ClusterNode[];
  /** Where ioredis `Cluster` starts from. */
  readonly startupNodes: readonly { host: string; port: number }[];
  /** A new ioredis `Cluster` on it, connected; closed by `stop()` too. */
  connect(options?: ConstructorParameters<typeof Cluster>[1]): Promise<Cluster>;
  /** A plain connection to one node (for `CLUSTER` and `INFO` commands); closed by `stop()` too. */
  node(port: number): Promise<Redis>;
  /** SIGKILLs the node on `port` and resolves once it has exited. */
  kill(port: number): Promise<void>;
  /** Starts the node on `port` again with its old `nodes.conf`, so it rejoins (as a replica, after a failover). */
  restart(port: number): Promise<void>;
  /** Resolves once every slot is served and `cluster_state` is `ok` on every live node. */
  settled(timeoutMs?: number): Promise<void>;
  /** Resolves once three replicas are linked to their masters and synced. */
  replicated(timeoutMs?: number): Promise<void>;
  /** Closes the connections, kills every node, removes the temp dir. */
  stop(): Promise<void>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Kills the servers of runs whose test process died, and removes their dirs. */
async function sweepLeftovers(): Promise<void> {
  if (!existsSync(ROOT)) return;
  for (const owner of await readdir(ROOT)) {
    if (alive(Number(owner))) continue;
    const dir = join(ROOT, owner);
    for (const run of await readdir(dir)) {
      for (const file of (await readdir(join(dir, run))).filter((name) => name.endsWith('.pid'))) {
        const pid = Number(await readFile(join(dir, run, file), 'utf8').catch(() => ''));
        if (pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
      }
    }
    await rm(dir, { recursive: true, force: true });
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** `count` ports p such that p and its cluster bus port p + 10000 are both free. */
async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < count) {
    const port = FIRST_PORT + Math.floor(Math.random() * PORT_SPAN);
    if (ports.includes(port)) continue;
    if ((await portFree(port)) && (await portFree(port + 10_000))) ports.push(port);
  }
  return ports;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`redis cluster: ${what} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Starts a cluster, or resolves `undefined` when `redis-server` is missing outside CI (with CI=true a
 * missing binary fails the run, as a missing service does).
 */
export async function startRedisCluster(): Promise<LocalRedisCluster | undefined> {
  if (!(await serviceAvailable('redis-server (for Redis Cluster)', () => run('redis-server', ['--version'])))) return undefined;
  await sweepLeftovers();
  const dir = join(ROOT, String(process.pid), `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`);
  await mkdir(dir, { recursive: true });
  const ports = await freePorts(6);
  const connections: (Redis | Cluster)[] = [];

  const launch = async (port: number): Promise<ChildProcess> => {
    const child = spawn(
      'redis-server',
      [
        '--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
        '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', String(NODE_TIMEOUT_MS),
        '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', `redis-${port}.log`,
      ],
      { stdio: 'ignore' },
    );
    await writeFile(join(dir, `${port}.pid`), String(child.pid));
    // A port taken meanwhile makes the node exit; the server that answers there must be this child.
    const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
    await until(`node ${port} did not answer`, async () => {
      if (gone()) return true;
      const probe = new Redis(port, '127.0.0.1', PROBE);
      try {
        probe.on('error', () => undefined);
        await probe.connect();
        return String(await probe.info('server')).includes(`process_id:${child.pid}\r`);
      } finally {
        probe.disconnect();
      }
    }, 10_000);
    if (gone()) throw new Error(`redis cluster: node ${port} exited (${String(child.exitCode ?? child.signalCode)}) before answering; see redis-${port}.log`);
    return child;
  };

  const nodes: ClusterNode[] = [];
  const cluster: LocalRedisCluster = {
    nodes,
    startupNodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    async connect(options) {
      const client = new Cluster(cluster.startupNodes.slice(), { lazyConnect: true, ...options });
      connections.push(client);
      await client.connect();
      return client;
    },
    node(port) {
      const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
      client.on('error', () => undefined);
      connections.push(client);
      return Promise.resolve(client);
    },
    async kill(port) {
      const node = nodes.find((candidate) => candidate.port === port);
      if (!node || node.process.exitCode !== null || node.process.signalCode !== null) return;
      const exited = new Promise((resolve) => node.process.once('exit', resolve));
      node.process.kill('SIGKILL');
      await exited;
    },
    async restart(port) {
      const node = nodes.find((candidate) => candidate.port === port);
      if (!node) throw new Error(`redis cluster: no node on port ${port}`);
      node.process = await launch(port);
    },
    async settled(timeoutMs = 20_000) {
      await until('did not settle', async () => {
        const live = nodes.filter((node) => node.process.exitCode === null && node.process.signalCode === null);
        for (const { port } of live) {
          const probe = new Redis(port, '127.0.0.1', PROBE);
          try {
            probe.on('error', () => undefined);
          await probe.connect();
            const info = String(await probe.call('CLUSTER', 'INFO'));
            if (!info.includes('cluster_state:ok') || !info.includes('cluster_slots_ok:16384')) return false;
            // A killed master still looks fine until the others deem it failed: wait for its slots to move.
            const shards = (await probe.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
            if (shards.some((shard) => !live.some((node) => node.port === shard[2][1]))) return false;
          } finally {
            probe.disconnect();
          }
        }
        return true;
      }, timeoutMs);
    },
    async replicated(timeoutMs = 20_000) {
      await until('replicas did not sync', async () => {
        let synced = 0;
        for (const { port } of nodes) {
          const probe = new Redis(port, '127.0.0.1', PROBE);
          try {
            probe.on('error', () => undefined);
            await probe.connect();
            const info = String(await probe.info('replication'));
            if (info.includes('master_link_status:up') && !/master_sync_in_progress:1/.test(info)) synced++;
            // Every node must also have heard (by gossip) of a replica for every shard.
            const shards = (await probe.call('CLUSTER', 'SLOTS')) as unknown[][];
            if (shards.some((shard) => shard.length < 4)) return false;
          } finally {
            probe.disconnect();
          }
        }
        return synced === 3;
      }, timeoutMs);
    },
    async stop() {
      for (const client of connections) client.disconnect();
      await Promise.all(nodes.map((node) => cluster.kill(node.port)));
      await rm(dir, { recursive: true, force: true });
      await rmdir(join(ROOT, String(process.pid))).catch(() => undefined);
    },
  };
  try {
    for (const port of ports) nodes.push({ port, process: await launch(port) });
    await run('redis-cli', ['--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', '1', '--cluster-yes']);
    await cluster.settled();
    await cluster.replicated();
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}
