/**
 * Faults against the real PostgreSQL server: a process killed mid-transaction, a backend terminated
 * mid-request, and many duplicates racing from two processes. Each test counts business rows, so a double
 * execution fails it.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { type OperationId } from '../../../src/core/receiver.js';
import { createReceiver } from '../../../src/receiver.js';
import { createPostgresStore, type PostgresStore } from '../../../src/stores/postgres/index.js';
import { POSTGRES_URL } from '../../support/services.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();

const CHILD = fileURLToPath(new URL('./fixtures/child.ts', import.meta.url));
const FINGERPRINT = 'f'.repeat(64);

/** Starts the child fixture; `lines` yields its stdout line by line. */
function child(...args: string[]): { readonly process: ChildProcessWithoutNullStreams; nextLine(): Promise<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: 'pipe' });
  let stderr = '';
  proc.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  return {
    process: proc,
    async nextLine() {
      const next = await lines.next();
      if (next.done) throw new Error(`the child exited before printing a line; stderr: ${stderr}`);
      return next.value;
    },
  };
}

function exited(proc: ChildProcessWithoutNullStreams): Promise<number | null> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.exitCode);
  return new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
}

describe.runIf(available)('PostgreSQL faults', () => {
  let db: TestSchema;
  let store: PostgresStore;

  beforeAll(async () => {
    db = await createTestSchema('rs_pgfault');
    await db.pool.query(`CREATE TABLE "${db.schema}".payments (key text NOT NULL, pid int)`);
  });

  afterAll(async () => {
    await db.drop();
  });

  beforeEach(() => {
    store = createPostgresStore({ pool: db.pool, schema: db.schema });
    return () => store.close();
  });

  async function payments(key: string): Promise<number> {
    const result = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".payments WHERE key = $1`, [key]);
    return result.rows[0]?.n ?? -1;
  }

  it('keeps the effect count at 1 when the process is SIGKILLed between the business write and the record', async () => {
    const key = 'crash-1';
    const worker = child('crash', POSTGRES_URL, db.schema, key);
    expect(await worker.nextLine()).toBe('inserted');
    worker.process.kill('SIGKILL');
    await exited(worker.process);

    // The killed transaction never committed; its claim (committed apart) is left in progress.
    expect(await payments(key)).toBe(0);
    expect((await store.get('shared', key))?.state).toBe('in_progress');

    // Past the child's 500 ms lease, a retry takes over and runs once; later retries replay.
    const clock = new ManualClock(Date.now() + 1_000);
    const retryStore = createPostgresStore({ pool: db.pool, schema: db.schema, clock });
    const receiver = createReceiver({ store: retryStore, transactional: true, clock });
    const id: OperationId = { scope: 'shared', key, fingerprint: FINGERPRINT };
    let runs = 0;
    for (let attempt = 0; attempt < 3; attempt++) {
      const result = await receiver.run(id, async ({ claim, tx }) => {
        runs++;
        expect(claim.takeover).toBe(true);
        await tx.query(`INSERT INTO "${db.schema}".payments (key, pid) VALUES ($1, $2)`, [key, process.pid]);
        return 'charged';
      });
      expect(result).toBe('charged');
    }
    expect(runs).toBe(1);
    expect(await payments(key)).toBe(1);
    expect((await store.get('shared', key))?.state).toBe('completed');
    await retryStore.close();
  });

  it.each([
    ['idle in the transaction', false],
    ['running a query', true],
  ])('fails cleanly when pg_terminate_backend kills the connection while %s; a retry succeeds once', async (_, busy) => {
    const key = `terminated-${busy ? 'busy' : 'idle'}`;
    const id: OperationId = { scope: 'shared', key, fingerprint: FINGERPRINT };
    const receiver = createReceiver({ store, transactional: true });
    let backend = 0;
    let signalled!: () => void;
    const inside = new Promise<void>((resolve) => {
      signalled = resolve;
    });
    const request = receiver.run(id, async ({ tx }) => {
      await tx.query(`INSERT INTO "${db.schema}".payments (key, pid) VALUES ($1, $2)`, [key, process.pid]);
      backend = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
      signalled();
      if (busy) await tx.query('SELECT pg_sleep(30)');
      else await new Promise((resolve) => setTimeout(resolve, 300));
      await tx.query('SELECT 1');
      return 'unreachable';
    });
    await inside;
    const killed = await db.pool.query<{ ok: boolean }>('SELECT pg_terminate_backend($1) AS ok', [backend]);
    expect(killed.rows[0]?.ok).toBe(true);

    await expect(request).rejects.toThrow();
    // No half-written record and no stuck lease: the business row rolled back, the claim was released.
    expect(await payments(key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();

    let runs = 0;
    for (let attempt = 0; attempt < 2; attempt++) {
      await receiver.run(id, async ({ tx }) => {
        runs++;
        await tx.query(`INSERT INTO "${db.schema}".payments (key, pid) VALUES ($1, $2)`, [key, process.pid]);
        return 'ok';
      });
    }
    expect(runs).toBe(1);
    expect(await payments(key)).toBe(1);
  });

  it('executes each key once when 100 duplicates per key race from 2 processes', async () => {
    const keys = Array.from({ length: 4 }, (_, i) => `race-${i}`);
    const workers = [0, 1].map(() => child('duplicates', POSTGRES_URL, db.schema, keys.join(','), '50'));
    for (const worker of workers) expect(await worker.nextLine()).toBe('ready');
    for (const worker of workers) worker.process.stdin.end('go\n');
    const summaries = await Promise.all(
      workers.map(async (worker) => JSON.parse(await worker.nextLine()) as Record<'executed' | 'replayed' | 'inProgress' | 'failed', number>),
    );
    await Promise.all(workers.map((worker) => exited(worker.process)));

    const total = (field: 'executed' | 'replayed' | 'inProgress' | 'failed'): number =>
      summaries.reduce((sum, summary) => sum + summary[field], 0);
    expect(total('failed')).toBe(0);
    expect(total('executed')).toBe(keys.length);
    expect(total('executed') + total('replayed') + total('inProgress')).toBe(keys.length * 100);
    for (const key of keys) {
      expect(await payments(key)).toBe(1);
      expect((await store.get('shared', key))?.state).toBe('completed');
    }
  });
});
