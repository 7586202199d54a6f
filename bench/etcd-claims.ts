// Claims per second and latency of the etcd store against the raw etcd transaction it is built on, in the
// same run on the same cluster; then the same storm of claims with a member SIGKILLed in its middle (a
// follower; then, on a fresh cluster, the leader): claims per second before and after, and the longest
// stretch without a completed claim. The members are started here on loopback (the `etcd` binary, or
// RETRYSAFE_ETCD_BINARY), each with its own data directory in the system's temporary directory.
//
//   node --import tsx bench/etcd-claims.ts [members] [claims per round] [in flight] [rounds]
//
// Defaults: 3 members, 2,000 claims per round, 32 in flight, 4 rounds (raw and store alternate).
import { randomUUID } from 'node:crypto';
import { argv } from 'node:process';
import type { Etcd3 } from 'etcd3';
import { createEtcdStore } from '../src/stores/etcd/index.js';
import { startEtcd, type EtcdCluster, type EtcdMember } from '../test/support/etcd.js';

const [membersArg = '3', claimsArg = '2000', inFlightArg = '32', roundsArg = '4'] = argv.slice(2);
const members = Number(membersArg);
const claims = Number(claimsArg);
const inFlight = Number(inFlightArg);
const rounds = Number(roundsArg);

/** Runs `claims` calls of `one` with `inFlight` at a time; resolves the claims/s, each call's latency (ms) and when it ended. */
async function run(one: (i: number) => Promise<unknown>, count: number): Promise<{ perSecond: number; latencies: number[]; ends: number[] }> {
  const latencies: number[] = [];
  const ends: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) {
        const i = next++;
        const t = performance.now();
        await one(i);
        latencies.push(performance.now() - t);
        ends.push(performance.now());
      }
    }),
  );
  return { perSecond: count / ((performance.now() - started) / 1000), latencies, ends };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** The raw floor: the claim's transaction shape (put if never created, else read) on a new key, no store around it. */
function rawClaim(client: Etcd3, prefix: string): (i: number) => Promise<unknown> {
  const value = Buffer.alloc(180, 1);
  return (i) => {
    const key = Buffer.from(`${prefix}/${i}`);
    return client.kv.txn({
      compare: [{ key, target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key, value } }],
      failure: [{ request_range: { key } }],
    });
  };
}

function storeClaim(client: Etcd3, prefix: string): (i: number) => Promise<unknown> {
  const store = createEtcdStore({ client, prefix });
  const fingerprint = 'f'.repeat(64);
  return async (i) => {
    // The owner token names the claim, so a claim sent again after a failure is recognised as its own.
    const result = await store.claim({ scope: 'bench', key: `k${i}`, fingerprint, leaseMs: 30_000, retentionMs: 86_400_000, leaseToken: `owner-${i}` });
    if (!result.acquired) throw new Error('a new key was refused');
  };
}

async function floor(cluster: EtcdCluster): Promise<void> {
  const client = cluster.client();
  const results = { raw: [] as { perSecond: number; latencies: number[] }[], store: [] as { perSecond: number; latencies: number[] }[] };
  for (let round = 0; round < rounds; round++) {
    const id = randomUUID();
    results.raw.push(await run(rawClaim(client, `raw/${id}`), claims));
    results.store.push(await run(storeClaim(client, `store/${id}`), claims));
  }
  for (const [name, list] of Object.entries(results)) {
    const perSecond = list.map((r) => r.perSecond);
    const latencies = list.flatMap((r) => r.latencies);
    console.log(
      `${name.padEnd(5)} claims/s per round ${perSecond.map((n) => n.toFixed(0)).join(', ')}; median ${percentile(perSecond, 50).toFixed(0)}; latency p50 ${percentile(latencies, 50).toFixed(2)} ms, p99 ${percentile(latencies, 99).toFixed(2)} ms`,
    );
  }
  const ratio = percentile(results.store.map((r) => r.perSecond), 50) / percentile(results.raw.map((r) => r.perSecond), 50);
  console.log(`store / raw floor (median claims/s): ${ratio.toFixed(2)}`);
  client.close();
}

/**
 * A storm of `claims * 2` store claims of new keys with `victim` SIGKILLed once half of them answered. A
 * refused claim would throw ("a new key was refused"): a claim that committed but whose answer was lost and
 * that is sent again must be recognised by its owner token, never lost or won twice.
 */
async function storm(cluster: EtcdCluster, name: string, victim: () => Promise<EtcdMember>): Promise<void> {
  const client = cluster.client();
  const claim = storeClaim(client, `storm/${randomUUID()}`);
  let killedAt = Infinity;
  const total = claims * 2;
  let answered = 0;
  let failed = 0;
  const started = performance.now();
  const { ends } = await run(async (i) => {
    // A claim that fails (the engine would answer 503) is sent again 50 ms later, as the client's retry would be.
    for (;;) {
      try {
        await claim(i);
        break;
      } catch (error) {
        if (error instanceof Error && error.message.includes('refused')) throw error;
        failed++;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    if (++answered === claims) {
      const member = await victim();
      killedAt = performance.now();
      await cluster.kill(member);
    }
  }, total);
  const sorted = [...ends].sort((a, b) => a - b);
  let gap = 0;
  for (let i = 1; i < sorted.length; i++) gap = Math.max(gap, (sorted[i] as number) - (sorted[i - 1] as number));
  const before = sorted.filter((t) => t < killedAt);
  const after = sorted.filter((t) => t >= killedAt);
  const rate = (list: number[], from: number, to: number): string => (list.length / ((to - from) / 1000)).toFixed(0);
  console.log(
    `${name}: ${total} claims, all acquired once; ${failed} attempts failed and were sent again; claims/s before the kill ${rate(before, started, killedAt)}, after ${rate(after, killedAt, sorted.at(-1) ?? killedAt)}; longest stretch without an answer ${gap.toFixed(0)} ms`,
  );
  client.close();
}

const cluster = await startEtcd(members);
try {
  await floor(cluster);
  if (members === 3) {
    const leader = await cluster.leader();
    await storm(cluster, 'follower SIGKILLed', () => Promise.resolve(cluster.members.find((m) => m !== leader) as EtcdMember));
  }
} finally {
  await cluster.stop();
}
if (members === 3) {
  const fresh = await startEtcd(3);
  try {
    await storm(fresh, 'leader SIGKILLed', () => fresh.leader());
  } finally {
    await fresh.stop();
  }
}
