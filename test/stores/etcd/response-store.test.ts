/**
 * Large responses on etcd kept in a side store (`responseStore`), on a one-member etcd and on real
 * PostgreSQL and SQLite: a 3 MiB response completed and replayed byte-identical, a holder SIGKILLed between
 * the side-store write and the etcd completion, a fenced-off completion, release, reap and the TTL sweep.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createEngine } from '../../../src/core/engine.js';
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../../../src/core/record.js';
import type { ResponseBodyId, ResponseBodyStore } from '../../../src/core/response-bodies.js';
import type { ClaimResult } from '../../../src/core/store.js';
import { createEtcdStore, ETCD_LEASE_GRACE_MS } from '../../../src/stores/etcd/index.js';
import { createPostgresResponseBodies } from '../../../src/stores/postgres/index.js';
import { createSqliteResponseBodies } from '../../../src/stores/sqlite/index.js';
import { runCrashingChild } from '../../support/crashing-child.js';
import { etcdAvailable, startEtcd } from '../../support/etcd.js';
import { createTestSchema, postgresAvailable } from '../../support/postgres-schema.js';
import { POSTGRES_URL } from '../../support/services.js';

const CRASHING_HOLDER = fileURLToPath(new URL('./fixtures/aside-crash.ts', import.meta.url));
const MIB = 1024 * 1024;
const FP = 'f'.repeat(64);

function won(result: ClaimResult): Claim & { fencingToken: string } {
  if (!result.acquired) throw new Error(`expected the claim to be acquired, got ${JSON.stringify(result.record)}`);
  return result.claim as Claim & { fencingToken: string };
}

const response = (body: Uint8Array, status = 201): StoredResponse => ({ status, headers: { 'content-type': 'application/octet-stream', 'x-order': '42' }, body });

/** The side store with its writes and deletes counted. */
function counted(side: ResponseBodyStore): ResponseBodyStore & { puts: number; gets: number; deletes: number } {
  const counts = { puts: 0, gets: 0, deletes: 0 };
  return Object.assign(counts, {
    put: (id: ResponseBodyId, body: Uint8Array, expiresAt: number) => (counts.puts++, side.put(id, body, expiresAt)),
    get: (id: ResponseBodyId) => (counts.gets++, side.get(id)),
    delete: (id: ResponseBodyId) => (counts.deletes++, side.delete(id)),
    deleteExpired: (now: number, limit: number) => side.deleteExpired(now, limit),
    close: () => side.close(),
  });
}

if ((await etcdAvailable()) && (await postgresAvailable())) {
  const cluster = await startEtcd(1);
  const client = cluster.client();
  const db = await createTestSchema('rs_etcd_aside', 4);
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-aside-'));
  const sides = {
    postgres: createPostgresResponseBodies({ pool: db.pool, schema: db.schema }),
    sqlite: createSqliteResponseBodies({ path: join(dir, 'bodies.db') }),
  };
  afterAll(async () => {
    await sides.sqlite.close();
    client.close();
    await cluster.stop();
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  describe.each(['postgres', 'sqlite'] as const)('etcd with its large bodies on %s', (kind) => {
    const side = sides[kind];
    let prefixes = 0;
    const open = (clock: ManualClock, responseStore: ResponseBodyStore = side) => {
      const prefix = `aside-${kind}-${++prefixes}`;
      return { prefix, store: createEtcdStore({ client, prefix, clock, responseStore }) };
    };

    it('completes a 3 MiB response into the side store and replays it byte-identical, the etcd value only its head', async () => {
      const clock = new ManualClock(1_700_000_000_000);
      const counting = counted(side);
      const { prefix, store } = open(clock, counting);
      const body = randomBytes(3 * MIB);
      const receiver = createEngine({ store, leaseMs: 10_000, retentionMs: 60_000 });
      let runs = 0;
      const work = () => (runs++, Promise.resolve(response(body)));
      const first = await receiver.execute({ scope: 's', key: 'big', fingerprint: FP }, work);
      expect(first).toMatchObject({ replayed: false, saved: true });
      const again = await receiver.execute({ scope: 's', key: 'big', fingerprint: FP }, work);
      expect(again.replayed).toBe(true);
      expect(Buffer.compare(Buffer.from(again.response.body), body)).toBe(0);
      expect(again.response).toMatchObject({ status: 201, headers: { 'content-type': 'application/octet-stream', 'x-order': '42' } });
      expect(again.response.headers[RESPONSE_NOT_KEPT_HEADER]).toBeUndefined();
      expect(runs).toBe(1);
      expect(counting.puts).toBe(1);
      const kv = (await client.getAll().prefix(`${prefix}/`).exec()).kvs;
      expect(kv).toHaveLength(1);
      expect(kv[0]?.value.length).toBeLessThan(1_000);
      const fencingToken = (await store.fencingToken('s', 'big')) ?? '';
      expect(Buffer.compare(Buffer.from((await side.get({ scope: 's', key: 'big', fencingToken })) ?? []), body)).toBe(0);
      // A small response stays in etcd: the side store is not written.
      await receiver.execute({ scope: 's', key: 'small', fingerprint: FP }, () => Promise.resolve(response(Uint8Array.of(1, 2, 3))));
      expect(counting.puts).toBe(1);
      expect((await store.get('s', 'small'))?.response?.body).toEqual(Buffer.from([1, 2, 3]));
      // Another fingerprint is refused (422) without reading the body.
      await expect(receiver.execute({ scope: 's', key: 'big', fingerprint: 'e'.repeat(64) }, work)).rejects.toMatchObject({ name: 'IdempotencyKeyReusedError' });
      expect(counting.gets).toBe(1);
    });

    it('answers a body missing or altered in the side store with the 410 form, never other bytes', async () => {
      const { store } = open(new ManualClock(1_000_000));
      const claim = won(await store.claim({ scope: 's', key: 'k', fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000 }));
      expect(await store.complete(claim, response(randomBytes(2 * MIB)), 60_000)).toBe(true);
      const id = { scope: 's', key: 'k', fencingToken: claim.fencingToken };
      await side.put(id, randomBytes(2 * MIB), Number.MAX_SAFE_INTEGER);
      const altered = await store.claim({ scope: 's', key: 'k', fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000 });
      expect(altered).toMatchObject({ acquired: false, record: { state: 'completed', response: { status: 201, headers: { [RESPONSE_NOT_KEPT_HEADER]: String(2 * MIB) } } } });
      expect(await side.delete(id)).toBe(true);
      expect((await store.get('s', 'k'))?.response).toMatchObject({ headers: { [RESPONSE_NOT_KEPT_HEADER]: String(2 * MIB) }, body: new Uint8Array(0) });
    });

    it('deletes the body of a completion fenced off by a takeover; the new holder replays its own', async () => {
      const clock = new ManualClock(1_000_000);
      const counting = counted(side);
      const { store } = open(clock, counting);
      const input = { scope: 's', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 };
      const paused = won(await store.claim(input));
      clock.advance(1_000);
      const taker = won(await store.claim(input));
      expect(BigInt(taker.fencingToken)).toBeGreaterThan(BigInt(paused.fencingToken));
      const late = randomBytes(2 * MIB);
      expect(await store.complete(paused, response(late), 60_000)).toBe(false);
      // Decided before any write: the record is no longer the paused holder's, so nothing was put.
      expect(counting.puts).toBe(0);
      const own = randomBytes(2 * MIB);
      expect(await store.complete(taker, response(own), 60_000)).toBe(true);
      const replay = await store.claim(input);
      expect(replay.acquired).toBe(false);
      expect(Buffer.compare(Buffer.from(replay.acquired ? [] : (replay.record.response?.body ?? [])), own)).toBe(0);
      expect(await side.get({ scope: 's', key: 'k', fencingToken: paused.fencingToken })).toBeUndefined();
    });

    it('deletes the body it put when a takeover lands between the side-store write and the etcd completion', async () => {
      const clock = new ManualClock(1_000_000);
      const input = { scope: 's', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 60_000 };
      let taker: (Claim & { fencingToken: string }) | undefined;
      const racing: ResponseBodyStore = {
        ...side,
        put: async (id, body, expiresAt) => {
          await side.put(id, body, expiresAt);
          // Another node, its clock past the lease, takes the key over while this completion is on its way.
          taker = won(await other.claim(input));
        },
        get: (id) => side.get(id),
        delete: (id) => side.delete(id),
      };
      const { prefix, store } = open(clock, racing);
      const other = createEtcdStore({ client, prefix, clock: new ManualClock(1_000_000 + 1_000), responseStore: side });
      const paused = won(await store.claim(input));
      expect(await store.complete(paused, response(randomBytes(2 * MIB)), 60_000)).toBe(false);
      expect(taker?.takeover).toBe(true);
      expect(await side.get({ scope: 's', key: 'k', fencingToken: paused.fencingToken })).toBeUndefined();
      expect(await store.get('s', 'k')).toMatchObject({ state: 'in_progress', leaseToken: taker?.leaseToken });
    });

    it('release deletes a body its holder put without committing the completion', async () => {
      const clock = new ManualClock(1_000_000);
      let fail = true;
      const failing: ResponseBodyStore = {
        ...side,
        put: async (id, body, expiresAt) => {
          await side.put(id, body, expiresAt);
          if (fail) throw new Error('injected: the process lost etcd after the body was written');
        },
        get: (id) => side.get(id),
        delete: (id) => side.delete(id),
      };
      const { store } = open(clock, failing);
      const claim = won(await store.claim({ scope: 's', key: 'k', fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000 }));
      await expect(store.complete(claim, response(randomBytes(2 * MIB)), 60_000)).rejects.toThrow(/injected/);
      const id = { scope: 's', key: 'k', fencingToken: claim.fencingToken };
      expect(await side.get(id)).toBeDefined();
      expect(await store.get('s', 'k')).toMatchObject({ state: 'in_progress' });
      fail = false;
      expect(await store.release(claim)).toBe(true);
      expect(await side.get(id)).toBeUndefined();
      expect(await store.get('s', 'k')).toBeUndefined();
    });

    it('reap deletes an expired record and its body, and sweeps bodies past their own expiry', async () => {
      const clock = new ManualClock(1_000_000);
      const { store } = open(clock);
      const claim = won(await store.claim({ scope: 's', key: 'k', fingerprint: FP, leaseMs: 1_000, retentionMs: 5_000 }));
      expect(await store.complete(claim, response(randomBytes(2 * MIB)), 5_000)).toBe(true);
      const orphan = { scope: 's', key: 'orphan', fencingToken: '1' };
      await side.put(orphan, Uint8Array.of(1), clock.now() + 5_000 + ETCD_LEASE_GRACE_MS);
      expect(await store.reap(10)).toBe(0);
      clock.advance(5_000);
      expect(await store.reap(10)).toBe(1);
      expect(await side.get({ scope: 's', key: 'k', fencingToken: claim.fencingToken })).toBeUndefined();
      expect(await side.get(orphan)).toBeDefined();
      clock.advance(ETCD_LEASE_GRACE_MS);
      expect(await store.reap(10)).toBe(0);
      expect(await side.get(orphan)).toBeUndefined();
    });

    it('a holder SIGKILLed after the side-store write and before the etcd completion leaves no replay and no stuck lease', async () => {
      const prefix = `aside-${kind}`;
      const env = { ETCD: cluster.hosts[0] ?? '', SIDE: kind, POSTGRES_URL, SCHEMA: db.schema, SQLITE_PATH: join(dir, 'bodies.db') };
      expect(await runCrashingChild(CRASHING_HOLDER, 'the side-store holder', env, 30_000)).toBe('SIGKILL');
      const store = createEtcdStore({ client, prefix, responseStore: side });
      const input = { scope: 's', key: 'crash', fingerprint: 'f', leaseMs: 10_000, retentionMs: 60_000 };
      const crashed = (await store.fencingToken('s', 'crash')) ?? '';
      // The crash came after the body was durable: it is there, under the dead holder's fencing token.
      expect((await side.get({ scope: 's', key: 'crash', fencingToken: crashed }))?.byteLength).toBe(3 * MIB);
      expect(await store.get('s', 'crash')).toMatchObject({ state: 'in_progress' });
      expect(await store.get('s', 'crash')).not.toHaveProperty('response');
      // Past the dead holder's 500 ms lease the key is taken over, and the new holder's body is what replays.
      await new Promise((resolve) => setTimeout(resolve, 600));
      const taker = won(await store.claim(input));
      expect(taker.takeover).toBe(true);
      expect(BigInt(taker.fencingToken)).toBeGreaterThan(BigInt(crashed));
      const own = randomBytes(3 * MIB);
      expect(await store.complete(taker, response(own), 60_000)).toBe(true);
      const replay = await store.get('s', 'crash');
      expect(Buffer.compare(Buffer.from(replay?.response?.body ?? []), own)).toBe(0);
      // The dead holder's body is swept once past its expiry (the store's clock moved on).
      const later = createEtcdStore({ client, prefix, clock: new ManualClock(Date.now() + 60_000 + ETCD_LEASE_GRACE_MS + 1_000), responseStore: side });
      expect(await later.reap(10)).toBe(1);
      expect(await side.get({ scope: 's', key: 'crash', fencingToken: crashed })).toBeUndefined();
      expect(await side.get({ scope: 's', key: 'crash', fencingToken: taker.fencingToken })).toBeUndefined();
    });
  });

  it('refuses a responseStore without the side-store methods by name', () => {
    expect(() => createEtcdStore({ client, responseStore: {} as ResponseBodyStore })).toThrow(/"responseStore"/);
  });
}
