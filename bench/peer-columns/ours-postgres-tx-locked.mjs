// retrysafe + PostgreSQL store, transactional mode with `transactionalClaim: 'locked'` (fastify plugin): the
// claim is a transaction-scoped advisory lock inside the business transaction and the record is inserted
// completed with the business rows, one commit per new key. Otherwise wired as `ours-postgres-tx` (the
// harness's counted work, then a "charge" row written through request.idempotency.tx).
import { PRODUCT_LABEL, dep, openReceiver, product } from './_retrysafe.mjs';

export const meta = {
  id: 'ours-postgres-tx-locked',
  label: `${PRODUCT_LABEL}: retrysafe + PostgreSQL store, transactional mode, transactionalClaim 'locked', charge row written through request.idempotency.tx (fastify plugin)`,
  framework: 'fastify',
  store: 'postgres',
  baseline: 'bare-fastify',
  idempotent: true,
  packages: ['fastify', 'pg'],
};

export async function start(ctx) {
  const Fastify = dep('fastify');
  const { createReceiver } = await product('.');
  const { createPostgresStore } = await product('./postgres');
  const { idempotency } = await product('./fastify');
  const opened = await openReceiver('postgres-tx', ctx); // drops and migrates the schema, opens the pool
  const { pool, schema } = opened;
  const store = createPostgresStore({ pool, schema, transactionalClaim: 'locked' });
  const receiver = createReceiver({ store, transactional: true });
  await pool.query(`CREATE TABLE "${schema}".charges (id text PRIMARY KEY, idem_key text NOT NULL, amount integer, currency text)`);
  const insert = `INSERT INTO "${schema}".charges (id, idem_key, amount, currency) VALUES ($1, $2, $3, $4)`;
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 }); // as the bare-fastify floor
  await app.register(idempotency, { receiver });
  app.post('/payments', async (req, reply) => {
    const result = await ctx.work(req.idempotency.key, req.body);
    await req.idempotency.tx.query({ name: 'bench_charge', text: insert, values: [result.id, result.key, result.amount, result.currency] });
    reply.code(201);
    return result;
  });
  await app.listen({ port: ctx.port, host: ctx.host });
  return {
    close: async () => {
      await app.close();
      await store.close();
      await opened.close();
    },
  };
}
