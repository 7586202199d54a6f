/**
 * Transactional mode with locked claims (`transactionalClaim: 'locked'`) on the real server, through the
 * engine: the key's advisory lock inside the business transaction, the record inserted completed with the
 * business rows, one commit per new key. Each test counts business rows and handler runs, so a double
 * execution fails it.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { LeaseLostError, RequestInProgressError } from '../../../src/core/errors.js';
import type { OperationId } from '../../../src/core/receiver.js';
import { createReceiver } from '../../../src/receiver.js';
import { createPostgresStore, type PostgresStore } from '../../../src/stores/postgres/index.js';
import { trackedGates } from '../../support/gates.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import { POSTGRES_URL } from '../../support/services.js';

const available = await postgresAvailable();
const CHILD = fileURLToPath(new URL('./fixtures/child.ts', import.meta.url));
const FP = 'c'.repeat(64);
const encoder = new TextEncoder();

/** Every gate made is opened after each test, so a failed test never leaves a transaction open. */
const { gate, openAll } = trackedGates();

describe.runIf(available)('PostgreSQL locked claims', () => {
  let db: TestSchema;
  let store: PostgresStore;
  let keyCounter = 0;

  beforeAll(async () => {
    db = await createTestSchema('rs_pglock');
    await db.pool.query(`CREATE TABLE "${db.schema}".payments (key text NOT NULL, amount int NOT NULL)`);
  });

  afterAll(async () => {
    await db.drop();
  });

  beforeEach(() => {
    store = createPostgresStore({ pool: db.pool, schema: db.schema, transactionalClaim: 'locked' });
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

  function pay(id: OperationId, amount: number) {
    return async ({ tx }: { tx: pg.PoolClient }): Promise<number> => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, $2)`, [id.key, amount]);
      return amount;
    };
  }

  it('rejects a transactionalClaim that is neither "apart" nor "locked"', () => {
    expect(() => createPostgresStore({ pool: db.pool, schema: db.schema, transactionalClaim: 'eager' as 'locked' })).toThrow(/transactionalClaim/);
  });

  it('commits the business row and the completed record together, with a fencing token, and replays without running', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    let runs = 0;
    const fences: bigint[] = [];
    const first = await receiver.run(id, async (context) => {
      runs++;
      expect(context.claim.takeover).toBe(false);
      fences.push(BigInt(context.claim.fencingToken ?? '-1'));
      // Inside the transaction, other connections see neither the business row nor any record.
      expect(await store.get(id.scope, id.key)).toBeUndefined();
      return pay(id, 100)(context);
    });
    expect(first).toBe(100);
    const record = await store.get(id.scope, id.key);
    expect(record).toMatchObject({ state: 'completed', fingerprint: FP });
    expect(new TextDecoder().decode(record?.response?.body)).toBe('100');
    expect(await receiver.run(id, pay(id, 999))).toBe(100);
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);

    // A later key's claim carries a larger token.
    const later = nextId();
    await receiver.run(later, (context) => {
      fences.push(BigInt(context.claim.fencingToken ?? '-1'));
      return pay(later, 1)(context);
    });
    expect(fences[1]).toBeGreaterThan(fences[0] as bigint);
  });

  it('answers in-flight duplicates 409 at once, shows nothing of the key while it runs, and replays after COMMIT', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    const inside = gate();
    const release = gate();
    const first = receiver.run(id, async (context) => {
      await pay(id, 1)(context);
      inside.open();
      await release.opened;
      return 'first';
    });
    await inside.opened;
    const started = performance.now();
    const duplicates = await Promise.allSettled(Array.from({ length: 5 }, () => receiver.run(id, () => Promise.resolve('dup'))));
    for (const outcome of duplicates) expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(RequestInProgressError);
    expect(performance.now() - started).toBeLessThan(1_000);
    // Another fingerprint cannot be told apart before the holder commits: 409 too, then 422.
    await expect(receiver.run({ ...id, fingerprint: 'd'.repeat(64) }, () => Promise.resolve('other'))).rejects.toBeInstanceOf(RequestInProgressError);
    expect(await store.listRecords({ scope: id.scope, keyPrefix: id.key, limit: 10 })).toEqual([]);

    release.open();
    expect(await first).toBe('first');
    expect(await receiver.run(id, () => Promise.resolve('again'))).toBe('first');
    await expect(receiver.run({ ...id, fingerprint: 'd'.repeat(64) }, () => Promise.resolve('other'))).rejects.toMatchObject({ code: 'idempotency-key-reused' });
    expect(await payments(id.key)).toBe(1);
  });

  it('leaves nothing behind when the handler throws or answers 5xx, and a retry runs again', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    await expect(
      receiver.run(id, async (context) => {
        await pay(id, 1)(context);
        throw new Error('card declined');
      }),
    ).rejects.toThrow('card declined');
    const failed = await receiver.execute(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 2)`, [id.key]);
      return { status: 503, headers: {}, body: new Uint8Array() };
    });
    expect(failed).toMatchObject({ replayed: false, saved: false });
    expect(await payments(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
    expect(await receiver.run(id, pay(id, 3))).toBe(3);
    expect(await payments(id.key)).toBe(1);
  });

  it('in wait mode hands duplicates the original response once it commits, woken by the lock (no polling)', async () => {
    const receiver = createReceiver({ store, transactional: true, inFlight: 'wait', pollIntervalMs: 60_000 });
    const id = nextId();
    const inside = gate();
    const release = gate();
    let runs = 0;
    const first = receiver.execute(id, async (context) => {
      runs++;
      await pay(id, 1)(context);
      inside.open();
      await release.opened;
      return { status: 201, headers: { 'content-type': 'text/plain' }, body: encoder.encode('original') };
    });
    await inside.opened;
    const duplicates = Array.from({ length: 3 }, () =>
      receiver.execute(id, () => {
        runs++;
        return Promise.resolve({ status: 200, headers: {}, body: encoder.encode('duplicate') });
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    release.open();
    const [original, ...replays] = await Promise.all([first, ...duplicates]);
    expect(original?.replayed).toBe(false);
    for (const replay of replays) {
      expect(replay.replayed).toBe(true);
      expect(new TextDecoder().decode(replay.response.body)).toBe('original');
    }
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('runs 30 parallel duplicates of 3 keys in wait mode with one execution and one business row per key', async () => {
    const receiver = createReceiver({ store, transactional: true, inFlight: 'wait' });
    const ids = [nextId(), nextId(), nextId()];
    let runs = 0;
    const outcomes = await Promise.all(
      ids.flatMap((id) =>
        Array.from({ length: 10 }, () =>
          receiver.run(id, async (context) => {
            runs++;
            await pay(id, 1)(context);
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

  it('rolls everything back and frees the key when the connection dies between the work and COMMIT', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    const request = receiver.run(id, async (context) => {
      await pay(id, 1)(context);
      const pid = (await context.tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      return 'unreachable';
    });
    await expect(request).rejects.toThrow();
    expect(await payments(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
    let runs = 0;
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(
        await receiver.run(id, (context) => {
          runs++;
          expect(context.claim.takeover).toBe(false);
          return pay(id, 2)(context);
        }),
      ).toBe(2);
    }
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('keeps the effect count at 1 when the process is SIGKILLed inside the transaction; a retry claims afresh', async () => {
    const id = { scope: 'shared', key: `crash-${nextId().key}`, fingerprint: 'f'.repeat(64) };
    // The child writes into `payments (key, pid)`: a table of that shape in this schema.
    await db.pool.query(`ALTER TABLE "${db.schema}".payments ADD COLUMN IF NOT EXISTS pid int`);
    await db.pool.query(`ALTER TABLE "${db.schema}".payments ALTER COLUMN amount SET DEFAULT 0`);
    const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, 'crash', POSTGRES_URL, db.schema, id.key], {
      stdio: 'pipe',
      env: { ...process.env, RETRYSAFE_TRANSACTIONAL_CLAIM: 'locked' },
    });
    const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
    expect((await lines.next()).value).toBe('inserted');
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
    // The server notices the dead client, rolls back and frees the lock.
    const receiver = createReceiver({ store, transactional: true, inFlight: 'wait' });
    let runs = 0;
    for (let attempt = 0; attempt < 3; attempt++) {
      expect(
        await receiver.run(id, (context) => {
          runs++;
          expect(context.claim.takeover).toBe(false);
          return pay(id, 5)(context);
        }),
      ).toBe(5);
    }
    expect(runs).toBe(1);
    expect(await payments(id.key)).toBe(1);
  });

  it('executes each key once when 50 duplicates per key race from each of 2 processes', async () => {
    await db.pool.query(`ALTER TABLE "${db.schema}".payments ADD COLUMN IF NOT EXISTS pid int`);
    await db.pool.query(`ALTER TABLE "${db.schema}".payments ALTER COLUMN amount SET DEFAULT 0`);
    const keys = Array.from({ length: 4 }, (_, i) => `race-${i}`);
    const workers = [0, 1].map(() => {
      const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, 'duplicates', POSTGRES_URL, db.schema, keys.join(','), '50'], {
        stdio: 'pipe',
        env: { ...process.env, RETRYSAFE_TRANSACTIONAL_CLAIM: 'locked' },
      });
      return { proc, lines: createInterface({ input: proc.stdout })[Symbol.asyncIterator]() };
    });
    for (const worker of workers) expect((await worker.lines.next()).value).toBe('ready');
    for (const worker of workers) worker.proc.stdin.end('go\n');
    const summaries = await Promise.all(workers.map(async (worker) => JSON.parse((await worker.lines.next()).value as string) as Record<string, number>));
    const total = (field: string): number => summaries.reduce((sum, summary) => sum + (summary[field] ?? 0), 0);
    expect(total('failed')).toBe(0);
    expect(total('executed')).toBe(keys.length);
    expect(total('executed') + total('replayed') + total('inProgress')).toBe(keys.length * 100);
    for (const key of keys) {
      expect(await payments(key)).toBe(1);
      expect((await store.get('shared', key))?.state).toBe('completed');
    }
  });

  it('takes over a record claimed apart whose lease ended, through the committed claim', async () => {
    const clock = new ManualClock(Date.now());
    const clocked = createPostgresStore({ pool: db.pool, schema: db.schema, clock, transactionalClaim: 'locked' });
    try {
      const id = nextId();
      const claimed = await clocked.claim({ ...id, leaseMs: 1_000, retentionMs: 60_000 });
      expect(claimed.acquired).toBe(true);
      const receiver = createReceiver({ store: clocked, transactional: true, clock, leaseMs: 1_000 });
      await expect(receiver.run(id, pay(id, 1))).rejects.toBeInstanceOf(RequestInProgressError);
      clock.advance(1_000);
      const result = await receiver.run(id, (context) => {
        expect(context.claim.takeover).toBe(true);
        return pay(id, 2)(context);
      });
      expect(result).toBe(2);
      expect(await payments(id.key)).toBe(1);
      expect((await clocked.get(id.scope, id.key))?.state).toBe('completed');
    } finally {
      await clocked.close();
    }
  });

  it('refuses the completion when a record was inserted apart from the lock meanwhile: the business rows roll back', async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    const apart = createPostgresStore({ pool: db.pool, schema: db.schema });
    try {
      await expect(
        receiver.run(id, async (context) => {
          await pay(id, 1)(context);
          expect((await apart.claim({ ...id, leaseMs: 60_000, retentionMs: 60_000 })).acquired).toBe(true);
          return 'late';
        }),
      ).rejects.toBeInstanceOf(LeaseLostError);
      expect(await payments(id.key)).toBe(0);
      expect((await store.get(id.scope, id.key))?.state).toBe('in_progress');
    } finally {
      await apart.close();
    }
  });

  it('ends a transaction held past maxExecutionMs (LeaseLostError "deadline"), rolled back, the key free at once', async () => {
    const receiver = createReceiver({ store, transactional: true, leaseMs: 200, maxExecutionMs: 300 });
    const id = nextId();
    const hung = receiver.run(id, async (context) => {
      await pay(id, 1)(context);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      return 'late';
    });
    await expect(hung).rejects.toMatchObject({ reason: 'deadline' });
    expect(await payments(id.key)).toBe(0);
    expect(await receiver.run(id, pay(id, 2))).toBe(2);
    expect(await payments(id.key)).toBe(1);
  });
});
