/**
 * etcd servers for the tests: each test file starts its own (one member for the store contract, three on
 * loopback for the failover tests) from the `etcd` binary, on spare loopback ports with a temporary data
 * directory, and stops them afterwards. A missing binary skips the suite locally and fails it in CI
 * (`services.ts`).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { createEtcdStore } from '../../src/stores/etcd/index.js';
import type { ScenarioStore } from '../http/scenario-stores.js';
import { freePort, serviceAvailable } from './services.js';

export const ETCD_BINARY = process.env['RETRYSAFE_ETCD_BINARY'] ?? 'etcd';

/** Whether the etcd binary runs here (see {@link serviceAvailable}). */
export function etcdAvailable(): Promise<boolean> {
  return serviceAvailable('etcd', () => {
    const probe = spawnSync(ETCD_BINARY, ['--version'], { encoding: 'utf8' });
    if (probe.error) return Promise.reject(probe.error);
    if (probe.status !== 0) return Promise.reject(new Error(`${ETCD_BINARY} --version exited with ${String(probe.status)}`));
    return Promise.resolve();
  });
}

/** One member of a test cluster. */
export interface EtcdMember {
  readonly name: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  process: ChildProcess | undefined;
}

/** A running test cluster. */
export interface EtcdCluster {
  readonly members: readonly EtcdMember[];
  /** Every member's client URL, for the client's `hosts`. */
  readonly hosts: string[];
  /** A client on every member; the caller closes it. */
  client(hosts?: string[]): Etcd3;
  /** Kills a member (SIGKILL) and waits for it to exit. */
  kill(member: EtcdMember): Promise<void>;
  /** The member that leads now. */
  leader(): Promise<EtcdMember>;
  /** Stops every member and removes the data directories. */
  stop(): Promise<void>;
}

/**
 * Starts `size` members on loopback (a short election timeout, so failover tests do not wait long) and
 * resolves once the cluster answers a write.
 */
export async function startEtcd(size = 1): Promise<EtcdCluster> {
  const root = mkdtempSync(join(tmpdir(), 'retrysafe-etcd-'));
  const members: EtcdMember[] = [];
  for (let i = 0; i < size; i++) {
    members.push({
      name: `m${i}`,
      clientUrl: `http://127.0.0.1:${await freePort()}`,
      peerUrl: `http://127.0.0.1:${await freePort()}`,
      process: undefined,
    });
  }
  const initialCluster = members.map((m) => `${m.name}=${m.peerUrl}`).join(',');
  for (const member of members) {
    const child = spawn(
      ETCD_BINARY,
      [
        `--name=${member.name}`,
        `--data-dir=${join(root, member.name)}`,
        `--listen-client-urls=${member.clientUrl}`,
        `--advertise-client-urls=${member.clientUrl}`,
        `--listen-peer-urls=${member.peerUrl}`,
        `--initial-advertise-peer-urls=${member.peerUrl}`,
        `--initial-cluster=${initialCluster}`,
        '--initial-cluster-state=new',
        `--initial-cluster-token=${root}`,
        '--heartbeat-interval=50',
        '--election-timeout=500',
        '--log-level=error',
        '--logger=zap',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    child.stderr?.resume();
    member.process = child;
  }
  const hosts = members.map((m) => m.clientUrl);
  const cluster: EtcdCluster = {
    members,
    hosts,
    client: (on = hosts) => new Etcd3({ hosts: on, dialTimeout: 2_000 }),
    async kill(member) {
      const child = member.process;
      member.process = undefined;
      if (!child || child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
    async leader() {
      for (const member of members) {
        if (!member.process) continue;
        const client = new Etcd3({ hosts: member.clientUrl, dialTimeout: 1_000 });
        try {
          const status = await client.maintenance.status({});
          if (status.leader === status.header.member_id) return member;
        } catch {
          // a member that does not answer is not the leader
        } finally {
          client.close();
        }
      }
      throw new Error('no etcd member leads');
    },
    async stop() {
      await Promise.all(members.map((member) => cluster.kill(member)));
      rmSync(root, { recursive: true, force: true });
    },
  };
  const probe = cluster.client();
  try {
    const deadline = Date.now() + 20_000;
    for (;;) {
      try {
        await probe.put('retrysafe-test-ready').value('1');
        break;
      } catch (error) {
        if (Date.now() > deadline) {
          await cluster.stop();
          throw new Error('etcd did not come up within 20 s', { cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  } finally {
    probe.close();
  }
  return cluster;
}

/** The HTTP behaviour table's store on a one-member etcd started by `setup`: each store under a prefix of its own. */
export function etcdScenarioStore(): ScenarioStore {
  let cluster: EtcdCluster | undefined;
  let client: Etcd3 | undefined;
  let stores = 0;
  return {
    name: 'etcd',
    async setup() {
      cluster = await startEtcd(1);
      client = cluster.client();
    },
    async teardown() {
      client?.close();
      await cluster?.stop();
    },
    open(clock) {
      if (!client) throw new Error('etcdScenarioStore: setup() has not run');
      return Promise.resolve(createEtcdStore({ client, prefix: `table/${++stores}`, ...(clock && { clock }) }));
    },
  };
}
