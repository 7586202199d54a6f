/**
 * The lease keep-alive, on every store and mode: work slower than the lease keeps its key while its
 * process lives (no takeover, its response saved), a retry that takes over an expired lease and then runs
 * as long as the original succeeds, and `maxExecutionMs` ends work that is alive but stuck. Real servers,
 * real time: the keep-alive renews on real timers, so the leases here are short (a few hundred ms).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import type { Receiver } from '../../src/core/receiver.js';
import type { StoredResponse } from '../../src/core/record.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { createTestSchema, type TestSchema } from '../support/postgres-schema.js';
import { deleteUnder } from '../support/redis.js';
import { postgresAvailable, REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';

/**
 * Renewals run every third of it, so one must land within two thirds of a lease of the one before: at
 * 300 ms a PostgreSQL renewal starved by a loaded 2-core machine (the whole suite running) missed that
 * window now and then, and the lease was lost.
 */
const LEASE_MS = 1_000;
/** Longer than the lease: three renewals or more, and past a duplicate sent two leases in. */
const SLOW_MS = 3_000;
const FP = 'f'.repeat(64);

const pgUp = await postgresAvailable();
const redisUp = await redisAvailable();

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function ok(text: string): StoredResponse {
  return { status: 201, headers: {}, body: new TextEncoder().encode(text) };
}

/** A store under test and whether it runs transactional mode too. */
interface Subject {
  readonly name: string;
  readonly transactional: boolean;
  open(): Promise<{ store: IdempotencyStore; close: () => Promise<void> }>;
}

const dir = mkdtempSync(join(tmpdir(), 'rs-keepalive-'));
let db: TestSchema | undefined;
let redis: Redis | undefined;
const redisPrefix = uniqueName('rs:keepalive');

beforeAll(async () => {
  if (pgUp) db = await createTestSchema('rs_keepalive', 6);
  if (redisUp) redis = new Redis(REDIS_URL);
});

afterAll(async () => {
  if (redis) {
    await deleteUnder(redis, redisPrefix);
    redis.disconnect();
  }
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const subjects: Subject[] = [
  { name: 'memory', transactional: false, open: () => Promise.resolve({ store: createMemoryStore(), close: () => Promise.resolve() }) },
  ...[false, true].map((transactional) => ({
    name: `sqlite${transactional ? ' (transactional)' : ''}`,
    transactional,
    open: () => {
      const store = createSqliteStore({ path: join(dir, `${randomUUID()}.db`) });
      return Promise.resolve({ store, close: () => store.close() });
    },
  })),
  ...(pgUp
    ? [false, true].map((transactional) => ({
        name: `postgres${transactional ? ' (transactional)' : ''}`,
        transactional,
        open: () => {
          if (!db) throw new Error('unreachable: PostgreSQL is up');
          return Promise.resolve({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), close: () => Promise.resolve() });
        },
      }))
    : []),
  ...(redisUp
    ? [
        {
          name: 'redis',
          transactional: false,
          open: () => {
            if (!redis) throw new Error('unreachable: Redis is up');
            const store = createRedisStore({ client: redis, prefix: redisPrefix });
            return Promise.resolve({ store, close: () => store.close() });
          },
        },
      ]
    : []),
];

describe.each(subjects)('lease keep-alive: $name', (subject) => {
  function receiverOn(store: IdempotencyStore, maxExecutionMs?: number): Receiver<unknown> {
    const options = { store, leaseMs: LEASE_MS, ...(maxExecutionMs === undefined ? {} : { maxExecutionMs }) };
    if (subject.transactional) return createReceiver({ ...options, store: store as never, transactional: true });
    return createReceiver(options);
  }

  it('keeps the key of work slower than the lease while it runs: a duplicate finds it in progress, and the response is saved', async () => {
    const { store, close } = await subject.open();
    try {
      const receiver = receiverOn(store);
      const id = { scope: 'keepalive', key: randomUUID(), fingerprint: FP };
      let runs = 0;
      const first = receiver.execute(id, async () => {
        runs++;
        await sleep(SLOW_MS);
        return ok('slow');
      });
      // Well past the lease: without renewals this duplicate would take the record over and run again.
      await sleep(LEASE_MS * 2);
      const duplicate = await receiver.execute(id, () => {
        runs++;
        return Promise.resolve(ok('duplicate'));
      }).catch((error: unknown) => error);
      const execution = await first;
      if (subject.name === 'sqlite (transactional)') {
        // The claim commits with the transaction: the duplicate queues behind it, then replays.
        expect(duplicate).toMatchObject({ replayed: true });
      } else {
        expect(duplicate).toBeInstanceOf(RequestInProgressError);
      }
      expect(execution.saved).toBe(true);
      expect(runs).toBe(1);
      const replay = await receiver.execute(id, () => Promise.reject(new Error('must not run')));
      expect(replay.replayed).toBe(true);
      expect(new TextDecoder().decode(replay.response.body)).toBe('slow');
    } finally {
      await close();
    }
  });

  it('lets a retry that took over an expired lease run as long as the original and save its response', async () => {
    const { store, close } = await subject.open();
    try {
      const id = { scope: 'keepalive', key: randomUUID(), fingerprint: FP };
      // The original holder claimed and died: no one renews its lease.
      const crashed = await store.claim({ ...id, leaseMs: LEASE_MS, retentionMs: 60_000 });
      expect(crashed.acquired).toBe(true);
      await sleep(LEASE_MS + 50);
      const receiver = receiverOn(store);
      let runs = 0;
      const execution = await receiver.execute(id, async ({ claim }) => {
        runs++;
        expect(claim.takeover).toBe(true);
        await sleep(SLOW_MS);
        return ok('retry');
      });
      expect(execution.saved).toBe(true);
      expect(runs).toBe(1);
      expect((await store.get(id.scope, id.key))?.state).toBe('completed');
    } finally {
      await close();
    }
  });

  it('ends work that is alive but stuck at maxExecutionMs with LeaseLostError, reason deadline, saving nothing', async () => {
    const { store, close } = await subject.open();
    try {
      const receiver = receiverOn(store, LEASE_MS * 2);
      const id = { scope: 'keepalive', key: randomUUID(), fingerprint: FP };
      const started = performance.now();
      const error = await receiver.execute(id, async () => {
        await sleep(LEASE_MS * 6);
        return ok('too late');
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LeaseLostError);
      expect((error as LeaseLostError).reason).toBe('deadline');
      expect(performance.now() - started).toBeLessThan(LEASE_MS * 5);
      await sleep(LEASE_MS * 5);
      expect((await store.get(id.scope, id.key))?.state).not.toBe('completed');
    } finally {
      await close();
    }
  });
});

describe.each(subjects)('lease keep-alive of batch items: $name', (subject) => {
  function receiverOn(store: IdempotencyStore, maxExecutionMs?: number): Receiver<unknown> {
    const options = { store, leaseMs: LEASE_MS, ...(maxExecutionMs === undefined ? {} : { maxExecutionMs }) };
    if (subject.transactional) return createReceiver({ ...options, store: store as never, transactional: true });
    return createReceiver(options);
  }

  it('keeps the key of a batch item slower than the lease while it runs: the same batch sent again finds it in flight', async () => {
    const { store, close } = await subject.open();
    try {
      const receiver = receiverOn(store);
      const items = [{ scope: 'keepalive-batch', key: randomUUID(), fingerprint: FP, input: 'slow' }];
      let runs = 0;
      const first = receiver.runBatch(items, async (input) => {
        runs++;
        await sleep(SLOW_MS);
        return input;
      });
      // Well past the lease: without renewals the second batch would take the key over and run it again.
      await sleep(LEASE_MS * 2);
      const [again] = await receiver.runBatch(items, (input) => {
        runs++;
        return Promise.resolve(`${input} again`);
      });
      const [outcome] = await first;
      expect(outcome).toMatchObject({ status: 'executed', value: 'slow', saved: true });
      expect(['in_flight', 'replayed']).toContain(again?.status);
      if (again?.status === 'replayed') expect(again.value).toBe('slow');
      expect(runs).toBe(1);
      expect((await store.get(items[0]!.scope, items[0]!.key))?.state).toBe('completed');
    } finally {
      await close();
    }
  });

  // Plain mode only: a transactional item's work runs inside its transaction, which the store bounds.
  if (!subject.transactional) it('ends a plain batch item stuck past maxExecutionMs with LeaseLostError, reason deadline, its key left to its lease', async () => {
    const { store, close } = await subject.open();
    try {
      const receiver = receiverOn(store, LEASE_MS * 2);
      const items = [{ scope: 'keepalive-batch', key: randomUUID(), fingerprint: FP, input: 'stuck' }];
      const started = performance.now();
      const [outcome] = await receiver.runBatch(items, async (input) => {
        await sleep(LEASE_MS * 6);
        return input;
      });
      expect(outcome?.status).toBe('failed');
      const error = outcome?.status === 'failed' ? outcome.error : undefined;
      expect(error).toBeInstanceOf(LeaseLostError);
      expect((error as LeaseLostError).reason).toBe('deadline');
      expect(performance.now() - started).toBeLessThan(LEASE_MS * 5);
      // Not released: a retry at once finds the key in flight.
      const [retry] = await receiver.runBatch(items, () => Promise.reject(new Error('must not run yet')));
      expect(retry?.status).toBe('in_flight');
      await sleep(LEASE_MS * 5);
      expect((await store.get(items[0]!.scope, items[0]!.key))?.state).not.toBe('completed');
    } finally {
      await close();
    }
  });
});
