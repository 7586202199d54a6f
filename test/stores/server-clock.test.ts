/**
 * One clock per shared store: PostgreSQL and Redis decide leases and retention by the server's clock, so
 * a process whose own clock is an hour off neither takes over a live lease (the handler would run twice)
 * nor keeps a dead one alive. The process clock is skewed by faking `Date.now`, which the system clock
 * (and so every receiver and store left on its default) reads.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { RequestInProgressError } from '../../src/core/errors.js';
import type { StoredResponse } from '../../src/core/record.js';
import { type OperationId } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';

const HOUR_MS = 3_600_000;
const LEASE_MS = 30_000;
const FP = 'c'.repeat(64);
const OK: StoredResponse = { status: 200, headers: {}, body: new TextEncoder().encode('ok') };
const realNow = Date.now.bind(Date);

/** Skews what `Date.now()` returns in this process by `offsetMs`; the servers keep their own time. */
function skewProcessClock(offsetMs: number): void {
  vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offsetMs);
}

/** A store on its default clock, and one whose clock is pinned (to plant records at a chosen server-relative time). */
interface Backend {
  readonly store: (clock?: ManualClock) => IdempotencyStore;
}

/**
 * Starts executing `id` on `receiver` with a handler that calls `onRun`, then holds until `release()` and
 * answers {@link OK}; resolves once the handler is running.
 */
async function startHeld(receiver: ReturnType<typeof createReceiver>, id: OperationId, onRun: () => void) {
  let release!: () => void;
  const holding = new Promise<void>((resolve) => {
    release = resolve;
  });
  let started!: () => void;
  const running = new Promise<void>((resolve) => {
    started = resolve;
  });
  const original = receiver.execute(id, async () => {
    onRun();
    started();
    await holding;
    return OK;
  });
  await running;
  return { original, release };
}

function suite(name: string, available: boolean, setup: () => Promise<{ readonly backend: Backend; readonly teardown: () => Promise<void> }>): void {
  describe.runIf(available)(`${name}: one clock per store`, () => {
    let backend: Backend;
    let teardown: () => Promise<void>;
    const opened: IdempotencyStore[] = [];
    const open = (clock?: ManualClock): IdempotencyStore => {
      const store = backend.store(clock);
      opened.push(store);
      return store;
    };

    beforeAll(async () => {
      ({ backend, teardown } = await setup());
    });
    afterEach(async () => {
      vi.restoreAllMocks();
      await Promise.all(opened.splice(0).map((store) => store.close()));
    });
    afterAll(async () => {
      await teardown();
    });

    for (const offset of [HOUR_MS, -HOUR_MS]) {
      it(`does not take over a live lease from a process whose clock is ${offset > 0 ? 'an hour ahead' : 'an hour behind'}`, async () => {
        const id: OperationId = { scope: 'skew', key: `live-${offset}`, fingerprint: FP };
        const first = createReceiver({ store: open(), leaseMs: LEASE_MS });
        let runs = 0;
        const { original, release } = await startHeld(first, id, () => {
          runs += 1;
        });

        skewProcessClock(offset);
        const second = createReceiver({ store: open(), leaseMs: LEASE_MS });
        await expect(
          second.execute(id, () => {
            runs += 1;
            return Promise.resolve(OK);
          }),
        ).rejects.toBeInstanceOf(RequestInProgressError);

        // The record's times are the server's milliseconds, not the skewed process's.
        const record = await open().get(id.scope, id.key);
        expect(record?.state).toBe('in_progress');
        expect(Math.abs((record?.leaseExpiresAt ?? 0) - (realNow() + LEASE_MS))).toBeLessThan(5_000);

        release();
        await expect(original).resolves.toMatchObject({ saved: true });
        expect(runs).toBe(1);
      });
    }

    it('lets a wait-mode duplicate on a clock an hour ahead wait for the original without spinning on claims', async () => {
      const id: OperationId = { scope: 'skew', key: 'wait', fingerprint: FP };
      const first = createReceiver({ store: open(), leaseMs: LEASE_MS });
      let runs = 0;
      const { original, release } = await startHeld(first, id, () => {
        runs += 1;
      });

      skewProcessClock(HOUR_MS);
      const store = open();
      let claims = 0;
      const counted: IdempotencyStore = Object.assign(Object.create(store) as IdempotencyStore, {
        claim: (input: Parameters<IdempotencyStore['claim']>[0]) => {
          claims += 1;
          return store.claim(input);
        },
      });
      const duplicate = createReceiver({ store: counted, leaseMs: LEASE_MS, inFlight: 'wait', waitTimeoutMs: 5_000, pollIntervalMs: 100 });
      const waiting = duplicate.execute(id, () => {
        runs += 1;
        return Promise.resolve(OK);
      });
      await new Promise((resolve) => setTimeout(resolve, 500));
      release();
      await original;
      const answer = await waiting;
      expect(answer.replayed).toBe(true);
      expect(runs).toBe(1);
      // One claim a poll interval at most (the waits end early on the completion): not one a millisecond.
      expect(claims).toBeLessThanOrEqual(8);
    });

    it('takes over a lease the server sees as expired, from a process whose clock is an hour behind', async () => {
      const id: OperationId = { scope: 'skew', key: 'expired', fingerprint: FP };
      // A crashed holder whose lease ended a minute ago by the server's (and this host's real) clock.
      const planted = await open(new ManualClock(realNow() - 60_000 - LEASE_MS)).claim({ ...id, leaseMs: LEASE_MS, retentionMs: HOUR_MS });
      expect(planted.acquired).toBe(true);

      skewProcessClock(-HOUR_MS);
      let runs = 0;
      const retry = createReceiver({ store: open(), leaseMs: LEASE_MS });
      const execution = await retry.execute(id, ({ claim }) => {
        runs += 1;
        expect(claim.takeover).toBe(true);
        // The new lease is measured from the server's now, not from the skewed process clock.
        expect(Math.abs(claim.leaseExpiresAt - (realNow() + LEASE_MS))).toBeLessThan(5_000);
        return Promise.resolve(OK);
      });
      expect(execution.saved).toBe(true);
      expect(runs).toBe(1);
      const record = await open().get(id.scope, id.key);
      expect(record?.state).toBe('completed');
      expect(Math.abs((record?.completedAt ?? 0) - realNow())).toBeLessThan(5_000);
    });
  });
}

suite('PostgreSQL', await postgresAvailable(), async () => {
  const db: TestSchema = await createTestSchema('rs_pgclock');
  return {
    backend: { store: (clock) => createPostgresStore({ pool: db.pool, schema: db.schema, ...(clock && { clock }) }) },
    teardown: () => db.drop(),
  };
});

describe.runIf(await postgresAvailable())('PostgreSQL: one clock per store, in transactions', () => {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema('rs_pgclocktx');
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  afterAll(async () => {
    await db.drop();
  });

  for (const preparedStatements of [true, false]) {
    it(`decides a transactional claim (claimTransaction) by the server's clock (preparedStatements: ${String(preparedStatements)})`, async () => {
      const store = createPostgresStore({ pool: db.pool, schema: db.schema, preparedStatements });
      try {
        const input = { scope: 'skew-tx', key: `view-${String(preparedStatements)}`, fingerprint: FP, leaseMs: LEASE_MS, retentionMs: HOUR_MS };
        const held = await store.claimTransaction(input, () => Promise.resolve());
        expect(held.acquired).toBe(true);
        for (const offset of [HOUR_MS, -HOUR_MS]) {
          skewProcessClock(offset);
          const again = await store.claimTransaction(input, () => Promise.resolve());
          expect(again.acquired).toBe(false);
          vi.restoreAllMocks();
        }
        // A transactional receiver claims on the pool first: no takeover from a clock an hour ahead either.
        skewProcessClock(HOUR_MS);
        const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS });
        let runs = 0;
        await expect(
          receiver.execute(input, () => {
            runs += 1;
            return Promise.resolve(OK);
          }),
        ).rejects.toBeInstanceOf(RequestInProgressError);
        expect(runs).toBe(0);
      } finally {
        await store.close();
      }
    });
  }
});

suite('Redis', await redisAvailable(), () => {
  const client = new Redis(REDIS_URL);
  const prefix = uniqueName('rs_redisclock');
  return Promise.resolve({
    backend: { store: (clock) => createRedisStore({ client, prefix, ...(clock && { clock }) }) },
    teardown: async () => {
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    },
  });
});
