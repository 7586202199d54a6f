/**
 * The etcd store on a one-member etcd the file starts itself: the shared store contract, then what only
 * etcd shows (the fencing token is the revision of the claim's write, record leases, the 410 form of a
 * response over the size limit, idempotent completion, renewal).
 */
import type { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { Claim, StoredResponse } from '../../../src/core/record.js';
import type { ClaimInput, ClaimResult } from '../../../src/core/store.js';
import { createEtcdStore } from '../../../src/stores/etcd/index.js';
import { etcdAvailable, startEtcd, type EtcdCluster } from '../../support/etcd.js';
import { storeContract } from '../contract.js';

const FP = 'f'.repeat(64);

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'shared', key, fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000, ...overrides };
}

function won(result: ClaimResult): Claim & { fencingToken: string } {
  if (!result.acquired) throw new Error(`expected the claim to be acquired, got ${JSON.stringify(result.record)}`);
  return result.claim as Claim & { fencingToken: string };
}

const response = (body: Uint8Array, status = 200): StoredResponse => ({ status, headers: { 'content-type': 'application/octet-stream' }, body });

if (await etcdAvailable()) {
  const cluster: EtcdCluster = await startEtcd(1);
  const client: Etcd3 = cluster.client();
  afterAll(async () => {
    client.close();
    await cluster.stop();
  });

  let tests = 0;
  storeContract('etcd', () => {
    const prefix = `contract/${++tests}`;
    const clock = new ManualClock(1_700_000_000_000);
    const store = createEtcdStore({ client, prefix, clock });
    return Promise.resolve({
      store,
      clock,
      close: async () => {
        await store.close();
        await client.delete().prefix(`${prefix}/`);
      },
    });
  });

  describe('etcd store', () => {
    it('fences by the revision of the claim write: the create_revision of a new key, a larger one on takeover', async () => {
      const clock = new ManualClock(1_000_000);
      const store = createEtcdStore({ client, prefix: 'fence', clock });
      const first = won(await store.claim(input('k')));
      const kv = await client.get('fence/r/6:sharedk').exec();
      expect(first.fencingToken).toBe(kv.kvs[0]?.create_revision);
      expect(await store.fencingToken('shared', 'k')).toBe(first.fencingToken);
      // A checkpoint rewrites the record; the token stays the claim's.
      const renewed = await store.checkpoint(first, 'p', 10_000);
      expect(renewed).toMatchObject({ fencingToken: first.fencingToken });
      expect(await store.fencingToken('shared', 'k')).toBe(first.fencingToken);
      clock.advance(10_000);
      const second = won(await store.claim(input('k')));
      expect(second.takeover).toBe(true);
      expect(BigInt(second.fencingToken)).toBeGreaterThan(BigInt(first.fencingToken));
      expect(await store.fencingToken('shared', 'k')).toBe(second.fencingToken);
      // A different key claimed later gets a larger token still: revisions are cluster-wide.
      const third = won(await store.claim(input('other')));
      expect(BigInt(third.fencingToken)).toBeGreaterThan(BigInt(second.fencingToken));
      await client.delete().prefix('fence/');
    });

    it('puts every record under an etcd lease that outlives its retention, shared by records of the same minute', async () => {
      const store = createEtcdStore({ client, prefix: 'leases', clock: new ManualClock(1_000_000) });
      won(await store.claim(input('a', { retentionMs: 3_600_000 })));
      won(await store.claim(input('b', { retentionMs: 3_600_000 })));
      const kvs = (await client.getAll().prefix('leases/').exec()).kvs;
      expect(kvs).toHaveLength(2);
      expect(kvs[0]?.lease).not.toBe('0');
      expect(kvs[0]?.lease).toBe(kvs[1]?.lease);
      const ttl = await client.leaseClient.leaseTimeToLive({ ID: kvs[0]?.lease ?? '0' });
      expect(Number(ttl.TTL)).toBeGreaterThanOrEqual(3_600 + 300);
      expect(Number(ttl.TTL)).toBeLessThanOrEqual(3_600 + 300 + 61);
      await client.delete().prefix('leases/');
    });

    it('saves a response over maxResponseBytes without its body, marked for the 410 answer', async () => {
      const store = createEtcdStore({ client, prefix: 'big', clock: new ManualClock(1_000_000), maxResponseBytes: 1_000 });
      const claim = won(await store.claim(input('k')));
      expect(await store.complete(claim, response(new Uint8Array(2_000).fill(7), 201), 60_000)).toBe(true);
      const record = await store.get('shared', 'k');
      expect(record?.response).toMatchObject({ status: 201, headers: { 'retrysafe-response-not-kept': '2000' } });
      expect(record?.response?.body.byteLength).toBe(0);
      // The same completion sent again (its reply lost) is answered true, the record unchanged.
      expect(await store.complete(claim, response(new Uint8Array(2_000).fill(7), 201), 60_000)).toBe(true);
      expect(await store.get('shared', 'k')).toEqual(record);
      await client.delete().prefix('big/');
    });

    it('answers a completion sent again by its own token true, and changes nothing', async () => {
      const clock = new ManualClock(1_000_000);
      const store = createEtcdStore({ client, prefix: 'again', clock });
      const claim = won(await store.claim(input('k')));
      expect(await store.complete(claim, response(Uint8Array.of(1, 2, 3)), 60_000)).toBe(true);
      const saved = await client.get('again/r/6:sharedk').exec();
      clock.advance(5);
      expect(await store.complete(claim, response(Uint8Array.of(1, 2, 3)), 60_000)).toBe(true);
      const after = await client.get('again/r/6:sharedk').exec();
      expect(after.kvs[0]?.mod_revision).toBe(saved.kvs[0]?.mod_revision);
      // Another response under the same token is answered as done too (the contract), and nothing changes.
      expect(await store.complete(claim, response(Uint8Array.of(9)), 60_000)).toBe(true);
      expect((await client.get('again/r/6:sharedk').exec()).kvs[0]?.mod_revision).toBe(saved.kvs[0]?.mod_revision);
      await client.delete().prefix('again/');
    });

    it('renews a lease while held, keeping the token and recovery point, and refuses a displaced holder', async () => {
      const clock = new ManualClock(1_000_000);
      const store = createEtcdStore({ client, prefix: 'renew', clock });
      const first = won(await store.claim(input('k', { leaseMs: 1_000, retentionMs: 2_000 })));
      await store.checkpoint(first, 'phase-1', 1_000);
      clock.advance(900);
      const renewed = await store.renew(first, 5_000);
      expect(renewed).toEqual({ ...first, leaseExpiresAt: clock.now() + 5_000, recoveryPoint: 'phase-1' });
      expect(await store.get('shared', 'k')).toMatchObject({ leaseExpiresAt: clock.now() + 5_000, expiresAt: clock.now() + 5_000, recoveryPoint: 'phase-1' });
      clock.advance(4_999);
      expect((await store.claim(input('k'))).acquired).toBe(false);
      clock.advance(1);
      const second = won(await store.claim(input('k')));
      expect(await store.renew(first, 5_000)).toBeUndefined();
      expect(await store.renew(second, 5_000)).toMatchObject({ leaseToken: second.leaseToken });
      await expect(store.renew(second, -1)).rejects.toThrow(TypeError);
      await client.delete().prefix('renew/');
    });

    it('refuses bad options by name', () => {
      expect(() => createEtcdStore({ client: {} as Etcd3 })).toThrow(/"client"/);
      expect(() => createEtcdStore({ client, prefix: '' })).toThrow(/"prefix"/);
      expect(() => createEtcdStore({ client, maxResponseBytes: 2_000_000 })).toThrow(/"maxResponseBytes"/);
    });
  });
}
