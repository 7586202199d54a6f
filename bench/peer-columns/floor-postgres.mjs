// Floor column: bare Fastify plus the raw PostgreSQL statements an idempotency layer cannot do without, on
// the pool the retrysafe columns use (pg.Pool({ max: 8 }), named prepared statements). A new key is one
// `INSERT` of the key before the work and one `UPDATE` with the response after it; a replay is one
// primary-key `SELECT` whose row is sent back. Which of the two a request takes is decided in process (a
// Map of the keys this server has seen), so no statement is spent on deciding: the floor that PostgreSQL
// columns of an HTTP server are read against (retrysafe's and the least layer's, `ceilings.mjs`).
// Measurement only, not a product: no fingerprint, no lease, nothing survives a restart or a second server.
//
// Copy it into the peer benchmark's `candidates/` folder with the `ceiling-*.mjs` files (it uses
// `_retrysafe.mjs`'s `dep()` and `schemaOf()`, so Fastify and pg are the product's copies).
import process from 'node:process';
import { dep, schemaOf } from './_retrysafe.mjs';

export const meta = {
  id: 'floor-postgres',
  label: 'floor: bare fastify + INSERT; UPDATE per new key, one PK SELECT per replay (measurement only, not a product)',
  framework: 'fastify',
  store: 'postgres',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify', 'pg'],
};

const TYPE = 'application/json; charset=utf-8';

export async function start(ctx) {
  const Fastify = dep('fastify');
  const pg = dep('pg');
  const pool = new pg.Pool({ connectionString: ctx.pgUrl, max: 8 });
  pool.on('error', (err) => process.stderr.write(`[pg pool] ${err.message}\n`));
  const table = `"${schemaOf(ctx.keyPrefix)}"`;
  await pool.query(`DROP TABLE IF EXISTS ${table}`);
  await pool.query(`CREATE TABLE ${table} (key text PRIMARY KEY, status int NOT NULL DEFAULT 0, type text, body text)`);
  const insert = { name: 'floor_insert', text: `INSERT INTO ${table} (key) VALUES ($1)` };
  const update = { name: 'floor_update', text: `UPDATE ${table} SET status = $2, type = $3, body = $4 WHERE key = $1` };
  const select = { name: 'floor_select', text: `SELECT status, type, body FROM ${table} WHERE key = $1` };
  /** key → false while its first request runs, true once its response is saved. */
  const seen = new Map();
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 }); // as the bare-fastify floor
  app.post('/payments', async (request, reply) => {
    const key = request.headers['idempotency-key'];
    const state = seen.get(key);
    if (state === undefined) {
      seen.set(key, false);
      await pool.query({ ...insert, values: [key] });
      const body = JSON.stringify(await ctx.work(key, request.body));
      await pool.query({ ...update, values: [key, 201, TYPE, body] });
      seen.set(key, true);
      return reply.code(201).type(TYPE).send(body);
    }
    if (state === false) return reply.code(409).header('retry-after', '1').send({ error: 'in flight' });
    const row = (await pool.query({ ...select, values: [key] })).rows[0];
    return reply.code(row.status).type(row.type).header('idempotent-replayed', 'true').send(row.body);
  });
  await app.listen({ port: ctx.port, host: ctx.host });
  return {
    close: async () => {
      await app.close();
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    },
  };
}
