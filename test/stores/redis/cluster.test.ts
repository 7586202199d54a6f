/**
 * The Redis store and the Redis session store on a real local Redis Cluster (3 masters, 3 replicas)
 * through an ioredis `Cluster`: the store contract, the session suite and the HTTP behaviour table, and
 * key walks (`reap`, `listAbandoned`, the session `reap`) that reach records on every master.
 */
import type { Cluster } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createRedisSessionStore } from '../../../src/sessions/index.js';
import { scanKeys, transportOf } from '../../../src/stores/redis/transport.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { recordKey } from '../../../src/stores/redis/keys.js';
import { honoDriver } from '../../http/hono-driver.js';
import type { ScenarioStore } from '../../http/scenario-stores.js';
import { httpScenarios } from '../../http/scenarios.js';
import { sessionSuite } from '../../sessions/contract.js';
import { startRedisCluster } from '../../support/redis-cluster.js';
import { uniqueName } from '../../support/services.js';
import { countSocketWrites, deleteUnder, redisContractFixtures } from '../../support/redis.js';
import { storeContract } from '../contract.js';

const FILE_PREFIX = uniqueName('rs_cluster');
const FP = 'f'.repeat(64);
const cluster = await startRedisCluster();

/** The port of the master holding `key`. */
async function masterOf(client: Cluster, key: string): Promise<number> {
  const slot = Number(await client.call('CLUSTER', 'KEYSLOT', key));
  const shards = (await client.call('CLUSTER', 'SLOTS')) as [number, number, [string, number, string]][];
  const shard = shards.find(([from, to]) => slot >= from && slot <= to);
  if (!shard) throw new Error(`no master serves slot ${slot}`);
  return shard[2][1];
}

if (cluster) {
  const client = await cluster.connect({ enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 1 } });
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await cluster.stop();
  });

  storeContract('redis cluster', redisContractFixtures(client, FILE_PREFIX));

  let sessionStores = 0;
  sessionSuite('the Redis store on Redis Cluster', () => createRedisSessionStore({ client, prefix: `${FILE_PREFIX}:s${++sessionStores}` }));

  let scenarioStores = 0;
  const clusterScenarioStore: ScenarioStore = {
    name: 'Redis Cluster',
    open: (clock) =>
      Promise.resolve(createRedisStore({ client, prefix: `${FILE_PREFIX}:h${++scenarioStores}`, ...(clock && { clock }) })),
  };
  httpScenarios(honoDriver, clusterScenarioStore);

  describe('redis store on Redis Cluster: one socket write per master per turn', () => {
    it('sends the scripts of one turn of the event loop in one write to each master', async () => {
      const prefix = `${FILE_PREFIX}:coalesced`;
      const store = createRedisStore({ client, prefix });
      const keys = Array.from({ length: 30 }, (_, i) => `k-${i}`);
      // A first round in another scope connects every master (ioredis opens a node's socket on first use).
      for (const key of keys) await store.claim({ scope: 'warm', key, fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 });
      const counts = client.nodes('master').map((node) => countSocketWrites(node.stream));
      const claims = await Promise.all(keys.map((key) => store.claim({ scope: 'shared', key, fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 })));
      const scriptWrites = counts.map((count) => count());
      expect(claims.every((result) => result.acquired)).toBe(true);
      const owners = new Set<number>();
      for (const key of keys) owners.add(await masterOf(client, recordKey(prefix, 'shared', key)));
      // Every master had scripts to run, and each got them in one write.
      expect(owners.size).toBe(3);
      expect(scriptWrites).toEqual([1, 1, 1]);
      await store.close();
      await deleteUnder(client, prefix);
    });
  });

  describe('redis store on Redis Cluster: key walks cover every master', () => {
    it('reaps and lists abandoned records that live on three different masters', async () => {
      const prefix = `${FILE_PREFIX}:walk`;
      const clock = new ManualClock(1_700_000_000_000);
      const store = createRedisStore({ client, prefix, clock });
      const keys = Array.from({ length: 30 }, (_, i) => `k-${i}`);
      const claims = [];
      for (const key of keys) {
        const result = await store.claim({ scope: 'shared', key, fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 });
        if (!result.acquired) throw new Error(`claim of ${key} was refused`);
        claims.push(result.claim);
      }
      const owners = new Set<number>();
      for await (const found of scanKeys(transportOf(client), `${prefix}:*`, 100)) {
        for (const key of found) owners.add(await masterOf(client, key));
      }
      expect(owners.size).toBe(3);

      for (const claim of claims) expect(await store.checkpoint(claim, 'charged', 0)).toBeDefined();
      clock.advance(1);
      const abandoned = await store.listAbandoned(100);
      expect(abandoned.map((record) => record.key).sort()).toEqual([...keys].sort());

      clock.advance(60_000);
      expect(await store.reap(1_000)).toBe(30);
      for (const key of keys) expect(await store.get('shared', key)).toBeUndefined();
      await store.close();
    });

    it('reaps expired sessions on every master', async () => {
      const prefix = `${FILE_PREFIX}:sessions-walk`;
      const store = createRedisSessionStore({ client, prefix });
      const ids = Array.from({ length: 20 }, (_, i) => `client-${i}`);
      for (const id of ids) expect(await store.create(id, 1_000, 100)).toBe(true);
      const owners = new Set<number>();
      for await (const found of scanKeys(transportOf(client), `${prefix}:*`, 100)) {
        for (const key of found) owners.add(await masterOf(client, key));
      }
      expect(owners.size).toBe(3);
      expect(await store.reap(5_000, 1_000)).toBe(20);
      for (const id of ids) expect(await store.stats(id)).toBeUndefined();
    });
  });
}
