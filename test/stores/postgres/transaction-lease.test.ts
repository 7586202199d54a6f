/**
 * PostgreSQL transactional mode when the transaction cannot start, or starts too late: with a pool of 2
 * and a connection timeout, a request that gets no pooled connection is answered 503 and its won claim
 * is released at once (not held for a lease); and a pooled connection that arrives after the lease ended
 * is answered `LeaseLostError` without running the handler.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError, StoreUnavailableError } from '../../../src/core/errors.js';
import { createReceiver } from '../../../src/receiver.js';
import { migrate } from '../../../src/postgres.js';
import { createPostgresStore } from '../../../src/stores/postgres/index.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../../support/services.js';

const available = await postgresAvailable();
const FP = 'e'.repeat(64);

describe.runIf(available)('PostgreSQL transactional mode: a transaction that cannot start in time', () => {
  const schema = uniqueName('rs_pgtxlease');
  let pool: pg.Pool;
  /** A separate pool for the test's own reads, so they never wait behind the pool under test. */
  let admin: pg.Pool;

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
    await migrate({ pool: admin, schema });
    pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2, connectionTimeoutMillis: 100 });
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function held(scope: string): Promise<number> {
    const result = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".records WHERE scope = $1 AND completed_at IS NULL`, [scope]);
    return result.rows[0]?.n ?? 0;
  }

  /** Waits (at most 3 s, far less than the 60 s lease) until no record of `scope` is held. */
  async function heldAfterReleases(scope: string): Promise<number> {
    const deadline = Date.now() + 3_000;
    let n = await held(scope);
    while (n > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      n = await held(scope);
    }
    return n;
  }

  it('releases the won claim of each of 120 keys whose transaction got no pooled connection (503), so none is held for a lease', async () => {
    const store = createPostgresStore({ pool, schema });
    const receiver = createReceiver({ store, transactional: true, leaseMs: 60_000 });
    const results: unknown[] = [];
    let ran = 0;
    for (let batch = 0; batch < 12; batch++) {
      // Both pooled connections busy for a while: the claims (one round trip each) queue and get them,
      // the transactions' own checkouts time out.
      const settled = await Promise.allSettled(
        Array.from({ length: 10 }, () =>
          receiver.run({ scope: 'starved', key: randomUUID(), fingerprint: FP }, async () => {
            ran++;
            await new Promise((resolve) => setTimeout(resolve, 250));
            return 'ran';
          }),
        ),
      );
      for (const outcome of settled) results.push(outcome.status === 'fulfilled' ? outcome.value : (outcome.reason as unknown));
    }
    const refused = results.filter((r) => r instanceof StoreUnavailableError).length;
    expect(refused).toBeGreaterThan(0);
    expect(ran + refused).toBe(120);
    // Every record left is a completed one: the 503s hold no key (released once a connection is free,
    // long before the 60 s lease would have freed it).
    expect(await heldAfterReleases('starved')).toBe(0);
  });

  it('answers LeaseLostError without running the handler when the pooled connection arrives after the lease', async () => {
    const slowPool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    slowPool.on('error', () => undefined);
    try {
      const store = createPostgresStore({ pool: slowPool, schema });
      const receiver = createReceiver({ store, transactional: true, leaseMs: 200 });
      // The claim gets the one connection first; the transaction's checkout then waits behind this hold.
      const id = { scope: 'late', key: randomUUID(), fingerprint: FP };
      let ran = false;
      const running = receiver.run(id, () => {
        ran = true;
        return Promise.resolve('ran');
      });
      // Queued right behind the claim's query: holds the connection for longer than the lease.
      const hold = (async () => {
        await new Promise((resolve) => setImmediate(resolve));
        const client = await slowPool.connect();
        await new Promise((resolve) => setTimeout(resolve, 400));
        client.release();
      })();
      const error = await running.catch((e: unknown) => e);
      await hold;
      expect(error).toBeInstanceOf(LeaseLostError);
      expect(ran).toBe(false);
      // The claim was released: a retry runs at once.
      expect(await heldAfterReleases('late')).toBe(0);
      expect(await receiver.run(id, () => Promise.resolve('retry'))).toBe('retry');
    } finally {
      await slowPool.end();
    }
  });
});
