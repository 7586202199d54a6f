/**
 * Plain-mode completions on PostgreSQL through PgBouncer, against the pooler's own faults (the shared
 * suite in ../completion-faults.ts): PgBouncer stopped and started again while every completion is under
 * way, and its `max_client_conn` exhausted by ballast clients while the app's pool needs new connections.
 */
import pg from 'pg';
import { afterAll } from 'vitest';
import { createPostgresStore } from '../../../src/stores/postgres/index.js';
import { startPgBouncer } from '../../support/pgbouncer.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import { completionFaultSuite } from '../completion-faults.js';

const available = await postgresAvailable();
/** Client connections the second pooler accepts: the app's pool (4) and the ballast share them. */
const MAX_CLIENT_CONN = 8;
const restarted = available ? await startPgBouncer() : undefined;
const limited = available ? await startPgBouncer({ maxClientConn: MAX_CLIENT_CONN }) : undefined;
// Migrated on a direct connection (migrations take a session-level advisory lock), used through the poolers.
const db: TestSchema | undefined = restarted && limited ? await createTestSchema('rs_pgbouncer_faults') : undefined;

afterAll(async () => {
  await db?.drop();
  await restarted?.close();
  await limited?.close();
});

function storeThrough(url: string, poolOptions: pg.PoolConfig = {}) {
  if (db === undefined) throw new Error('unreachable: the schema exists');
  const pool = new pg.Pool({ connectionString: url, max: 4, ...poolOptions });
  // Connections the pooler drops must not crash the run.
  pool.on('error', () => undefined);
  return { pool, store: createPostgresStore({ pool, schema: db.schema, preparedStatements: false }) };
}

if (restarted && db) {
  completionFaultSuite('PgBouncer stopped and started again', () => {
    const { pool, store } = storeThrough(restarted.url);
    return Promise.resolve({
      store,
      fault: { inject: () => restarted.stop(), lift: () => restarted.start() },
      close: async () => {
        await store.close();
        await pool.end();
      },
    });
  });
}

if (limited && db) {
  completionFaultSuite(`PgBouncer at max_client_conn (${MAX_CLIENT_CONN}) held by ballast clients`, () => {
    // Idle connections close soon, so the completions need new ones (as a pool that scales down does).
    const { pool, store } = storeThrough(limited.url, { idleTimeoutMillis: 50 });
    const ballast: pg.Client[] = [];
    return Promise.resolve({
      store,
      fault: {
        async inject() {
          await waitFor(() => pool.totalCount === 0);
          for (;;) {
            const client = new pg.Client({ connectionString: limited.url });
            client.on('error', () => undefined);
            const refusal = await client.connect().then(
              () => undefined,
              (error: Error) => error,
            );
            if (refusal === undefined) {
              ballast.push(client);
              continue;
            }
            if (!/max_client_conn/.test(refusal.message)) throw refusal;
            return;
          }
        },
        async lift() {
          await Promise.all(ballast.splice(0).map((client) => client.end()));
        },
      },
      close: async () => {
        await store.close();
        await pool.end();
      },
    });
  });
}

async function waitFor(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('the pool kept its idle connections');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
