/**
 * The etcd store on a three-member cluster on loopback, with members SIGKILLed mid-storm: a follower, then
 * (on a fresh cluster) the leader. Each key is claimed by five concurrent duplicates; a duplicate whose
 * claim or completion fails (the member it talked to died, an election is under way) sends the same
 * request again with the same owner token, as a client retrying an indeterminate failure would. Claims
 * continue on the majority, every key is completed, and none runs twice.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Claim } from '../../../src/core/record.js';
import type { ClaimInput } from '../../../src/core/store.js';
import { createEtcdStore } from '../../../src/stores/etcd/index.js';
import { etcdAvailable, startEtcd, type EtcdCluster, type EtcdMember } from '../../support/etcd.js';

const KEYS = 40;
const DUPLICATES = 5;

/** Retries `attempt` (a store call that may fail while a member dies) until it answers, for at most 30 s. */
async function untilAnswered<T>(attempt: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** Runs the storm, killing `victim()` once a quarter of the keys were claimed; resolves what ran. */
async function storm(cluster: EtcdCluster, victim: () => Promise<EtcdMember>) {
  const client = cluster.client();
  const store = createEtcdStore({ client, prefix: 'storm' });
  const executions = new Map<string, number>();
  let claimed = 0;
  let claimedAfterKill = 0;
  let killed: Promise<void> | undefined;
  let down = false;
  const duplicate = async (key: string, copy: number): Promise<void> => {
    const input: ClaimInput = { scope: 's', key, fingerprint: 'f', leaseMs: 60_000, retentionMs: 600_000, leaseToken: `${key}/${copy}` };
    const result = await untilAnswered(() => store.claim(input));
    if (!result.acquired) return;
    claimed++;
    if (down) claimedAfterKill++;
    if (claimed === KEYS / 4) {
      killed = victim()
        .then((member) => cluster.kill(member))
        .then(() => {
          down = true;
        });
    }
    executions.set(key, (executions.get(key) ?? 0) + 1);
    const claim: Claim = result.claim;
    expect(await untilAnswered(() => store.complete(claim, { status: 200, headers: {}, body: Buffer.from(key) }, 600_000))).toBe(true);
  };
  const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`);
  // Keys arrive in waves of four, so the kill lands in the middle of the storm rather than after it.
  for (let i = 0; i < KEYS; i += 4) {
    await Promise.all(keys.slice(i, i + 4).flatMap((key) => Array.from({ length: DUPLICATES }, (_, copy) => duplicate(key, copy))));
  }
  await killed;
  const records = await Promise.all(keys.map((key) => untilAnswered(() => store.get('s', key))));
  client.close();
  return { executions, claimedAfterKill, records };
}

/** A member that does not lead. */
async function follower(cluster: EtcdCluster): Promise<EtcdMember> {
  const leader = await cluster.leader();
  const other = cluster.members.find((member) => member !== leader);
  if (other === undefined) throw new Error('no follower');
  return other;
}

if (await etcdAvailable()) {
  describe('etcd store failover (three members on loopback)', () => {
    let cluster: EtcdCluster | undefined;
    afterEach(async () => {
      await cluster?.stop();
    });

    it.each([
      ['a follower', follower],
      ['the leader', (c: EtcdCluster) => c.leader()],
    ] as const)('keeps claiming on the majority when %s is SIGKILLed mid-storm, and runs no key twice', async (_name, pick) => {
      cluster = await startEtcd(3);
      const current = cluster;
      const { executions, claimedAfterKill, records } = await storm(current, () => pick(current));
      expect([...executions.values()].filter((n) => n !== 1)).toEqual([]);
      expect(executions.size).toBe(KEYS);
      expect(claimedAfterKill).toBeGreaterThanOrEqual(KEYS / 2);
      expect(records.map((record) => record?.state)).toEqual(Array.from({ length: KEYS }, () => 'completed'));
      expect(current.members.filter((member) => member.process !== undefined)).toHaveLength(2);
    }, 120_000);
  });
}
