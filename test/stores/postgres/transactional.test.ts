/**
 * Transactional mode on PostgreSQL through the engine (`createReceiver({ store, transactional: true })`):
 * the claim, the handler's business writes and the saved response commit together; a duplicate of a
 * running request is answered at once; `wait` mode gets the original's response.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { LeaseLostError, RequestInProgressError, StoreUnavailableError, TransactionAbortedError } from '../../../src/core/errors.js';
import { type OperationId } from '../../../src/core/receiver.js';
import { createReceiver } from '../../../src/receiver.js';
import { createPostgresStore, type PostgresStore } from '../../../src/stores/postgres/index.js';
import { trackedGates } from '../../support/gates.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();

const FP = 'c'.repeat(64);

/** Every gate made is opened after each test, so a failed test never leaves a transaction open. */
const { gate, openAll } = trackedGates();

describe.runIf(available)('PostgreSQL transactional mode', () => {
  let db: TestSchema;
  let store: PostgresStore;
  let clock: ManualClock;
  let keyCounter = 0;

  beforeAll(async () => {
    db = await createTestSchema('rs_pgtx');
    await db.pool.query(`CREATE TABLE "${db.schema}".payments (key text NOT NULL, amount int NOT NULL)`);
  });

  afterAll(async () => {
    await db.drop();
  });

  beforeEach(async () => {
    clock = new ManualClock(Date.now());
    store = createPostgresStore({ pool: db.pool, schema: db.schema, clock });
    await db.pool.query(`TRUNCATE "${db.schema}".payments`);
    return async () => {
      openAll();
      await store.close();
    };
  });

  function nextId(): OperationId {
    keyCounter++;
    return { scope: 'tenant-1', key: `key-${keyCounter}`, fingerprint: FP };
  }

  async function payments(key: string): Promise<number> {
    const result = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".payments WHERE key = $1`, [key]);
    return result.rows[0]?.n ?? -1;
  }

  it('opens a transaction only for a claim it won: a replay and a 409 cost one claim and no transaction', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    // Every transaction of the store, bounded by a lease or not, opens through its private transact().
    const opened = vi.spyOn(store as unknown as { transact: PostgresStore['transaction'] }, 'transact');
    const id = nextId();
    const first = gate();
    const running = gate();
    const original = receiver.run(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 1)`, [id.key]);
      running.open();
      await first.opened;
      return { paid: 1 };
    });
    await running.opened;
    await expect(receiver.run(id, () => Promise.resolve({ paid: 2 }))).rejects.toBeInstanceOf(RequestInProgressError);
    expect(opened).toHaveBeenCalledTimes(1);
    first.open();
    expect(await original).toEqual({ paid: 1 });
    expect(await receiver.run(id, () => Promise.resolve({ paid: 3 }))).toEqual({ paid: 1 });
    expect(opened).toHaveBeenCalledTimes(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('commits the business row and the saved response together, and replays without running again', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const id = nextId();
    let runs = 0;
    const pay = () =>
      receiver.run(id, async ({ tx }) => {
        runs++;
        await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
        // Inside the transaction, other connections see neither the business row nor a completed record.
        expect(await payments(id.key)).toBe(0);
        return { charged: 100 };
      });
    expect(await pay()).toEqual({ charged: 100 });
    expect(await payments(id.key)).toBe(1);
    const record = await store.get(id.scope, id.key);
    expect(record?.state).toBe('completed');
    expect(new TextDecoder().decode(record?.response?.body)).toBe('{"charged":100}');

    expect(await pay()).toEqual({ charged: 100 });
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('leaves nothing behind when the handler throws, and a retry runs again', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const id = nextId();
    let runs = 0;
    await expect(
      receiver.run(id, async ({ tx }) => {
        runs++;
        await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
        throw new Error('card declined');
      }),
    ).rejects.toThrow('card declined');
    expect(await payments(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();

    await receiver.run(id, async ({ tx }) => {
      runs++;
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
      return 'ok';
    });
    expect(runs).toBe(2);
    expect(await payments(id.key)).toBe(1);
  });

  it('rolls back the business writes of a 5xx response and releases the key', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const id = nextId();
    const execution = await receiver.execute(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
      return { status: 503, headers: {}, body: new Uint8Array() };
    });
    expect(execution).toMatchObject({ replayed: false, saved: false });
    expect(execution.response.status).toBe(503);
    expect(await payments(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
  });

  it('answers a concurrent duplicate with RequestInProgressError at once, without waiting for the first', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const id = nextId();
    const inside = gate();
    const release = gate();
    const first = receiver.run(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
      inside.open();
      await release.opened;
      return 'first';
    });
    await inside.opened;

    const started = performance.now();
    const duplicates = await Promise.allSettled(Array.from({ length: 5 }, () => receiver.run(id, () => Promise.resolve('dup'))));
    const elapsed = performance.now() - started;
    for (const outcome of duplicates) {
      expect(outcome.status).toBe('rejected');
      expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(RequestInProgressError);
    }
    // The first request is still parked inside its open transaction: the duplicates did not wait for it.
    expect(elapsed).toBeLessThan(1_000);

    release.open();
    expect(await first).toBe('first');
    expect(await receiver.run(id, () => Promise.resolve('again'))).toBe('first');
    expect(await payments(id.key)).toBe(1);
  });

  it('in wait mode hands a concurrent duplicate the original response once it commits (NOTIFY, no polling)', async () => {
    // A poll interval far beyond the test's span: only a notification can wake the waiter in time.
    const receiver = createReceiver({ store, transactional: true, clock, inFlight: 'wait', pollIntervalMs: 60_000 });
    const id = nextId();
    const inside = gate();
    const release = gate();
    let runs = 0;
    const first = receiver.execute(id, async ({ tx }) => {
      runs++;
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
      inside.open();
      await release.opened;
      return { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('original') };
    });
    await inside.opened;
    const duplicate = receiver.execute(id, () => {
      runs++;
      return Promise.resolve({ status: 200, headers: {}, body: new TextEncoder().encode('duplicate') });
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    release.open();
    const [original, replay] = await Promise.all([first, duplicate]);
    expect(original.replayed).toBe(false);
    expect(replay.replayed).toBe(true);
    expect(replay.response.status).toBe(201);
    expect(new TextDecoder().decode(replay.response.body)).toBe('original');
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('fences a stale worker whose lease was taken over: its business writes roll back, the winner stands', async () => {
    const receiver = createReceiver({ store, transactional: true, clock, leaseMs: 1_000 });
    const id = nextId();
    const inside = gate();
    const release = gate();
    const stale = receiver.run(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 1)`, [id.key]);
      inside.open();
      await release.opened;
      return 'stale';
    });
    await inside.opened;
    clock.advance(1_000);
    const winner = await receiver.run(id, async ({ claim, tx }) => {
      expect(claim.takeover).toBe(true);
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 2)`, [id.key]);
      return 'winner';
    });
    expect(winner).toBe('winner');
    release.open();
    await expect(stale).rejects.toBeInstanceOf(LeaseLostError);

    const rows = await db.pool.query<{ amount: number }>(`SELECT amount FROM "${db.schema}".payments WHERE key = $1`, [id.key]);
    expect(rows.rows).toEqual([{ amount: 2 }]);
    expect(await receiver.run(id, () => Promise.resolve('later'))).toBe('winner');
  });

  it('does not commit a transaction the handler aborted by swallowing a SQL error', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const id = nextId();
    await expect(
      receiver.run(id, async ({ tx }) => {
        await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
        await tx.query('SELECT 1 / 0').catch(() => undefined);
        return 'looks fine';
      }),
    ).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(await payments(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
    // The same swallowed error as the last statement before COMMIT: PostgreSQL rolls back, and says so.
    const aborted = store.transaction(async (tx) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
      await tx.query('SELECT 1 / 0').catch(() => undefined);
    });
    await expect(aborted).rejects.toBeInstanceOf(TransactionAbortedError);
    expect(await payments(id.key)).toBe(0);
  });

  it('claims keys and scopes with quotes, backslashes and unicode exactly', async () => {
    const receiver = createReceiver({ store, transactional: true, clock });
    const scope = `scope "ü" ';-- \\`;
    const keys = [`it's "quoted" \\ back\`tick`, "'); DROP TABLE x; --", 'ключ-🔑-鍵', 'x'.repeat(255)];
    for (const key of keys) {
      const id = { scope, key, fingerprint: FP };
      expect(await receiver.run(id, () => Promise.resolve(key))).toBe(key);
      expect(await receiver.run(id, () => Promise.resolve('second run'))).toBe(key);
      const record = await store.get(scope, key);
      expect(record).toMatchObject({ scope, key, state: 'completed' });
    }
  });

  it.each([false, true])('fails closed when PostgreSQL is unreachable (transactional: %s): StoreUnavailableError, the work never runs', async (transactional) => {
    const unreachable = createPostgresStore({ connectionString: 'postgres://postgres@127.0.0.1:1/test', schema: db.schema });
    try {
      let runs = 0;
      const work = (): Promise<string> => {
        runs++;
        return Promise.resolve('ran');
      };
      const receiver = transactional
        ? createReceiver({ store: unreachable, transactional: true })
        : createReceiver({ store: unreachable });
      await expect(receiver.run(nextId(), work)).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(runs).toBe(0);
    } finally {
      await unreachable.close();
    }
  });

  it('runs 30 parallel duplicates of 3 keys with one execution and one business row per key', async () => {
    const receiver = createReceiver({ store, transactional: true, clock, inFlight: 'wait' });
    const ids = [nextId(), nextId(), nextId()];
    let runs = 0;
    const outcomes = await Promise.all(
      ids.flatMap((id) =>
        Array.from({ length: 10 }, () =>
          receiver.run(id, async ({ tx }) => {
            runs++;
            await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [id.key]);
            await new Promise((resolve) => setTimeout(resolve, 30));
            return id.key;
          }),
        ),
      ),
    );
    expect(runs).toBe(3);
    expect(outcomes).toEqual(ids.flatMap((id) => Array.from({ length: 10 }, () => id.key)));
    for (const id of ids) expect(await payments(id.key)).toBe(1);
  });
});
