/**
 * A Stripe-shaped API: `POST /v1/charges` takes a form-encoded body as Stripe's does and answers a charge
 * object, every error in Stripe's shape (`{ "error": { "type", "code", "message" } }` with
 * `Stripe-Should-Retry`), and the charge commits with its idempotency record (SQLite, transactional mode),
 * so stripe-node's retries with its idempotency keys create each charge once.
 *
 *   PORT=4242 DATABASE=charges.db node --import tsx examples/stripe-shaped/server.ts
 *
 * Environment: `PORT` (default 4242; 0 picks one), `DATABASE` (default `charges.db`), `LEASE_MS` (default
 * 30000), `SLOW_MS` (how long a charge whose `description` is `slow` takes; default 200). Prints
 * `listening <port>` once it accepts connections.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Database } from 'better-sqlite3';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { createReceiver, stripeErrorShape } from '../../src/index.js';
import { idempotency, idempotencyOf } from '../../src/http/fastify.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';

const port = Number(process.env['PORT'] ?? 4242);
const slowMs = Number(process.env['SLOW_MS'] ?? 200);
const store = createSqliteStore({ path: process.env['DATABASE'] ?? 'charges.db' });
store.database.exec(`CREATE TABLE IF NOT EXISTS charges (
  id TEXT PRIMARY KEY,
  idempotency_key TEXT NOT NULL,
  amount INTEGER NOT NULL,
  currency TEXT NOT NULL,
  description TEXT,
  created INTEGER NOT NULL
)`);
const receiver = createReceiver({ store, transactional: true, leaseMs: Number(process.env['LEASE_MS'] ?? 30_000) });

const app = Fastify();
// Stripe's v1 API takes application/x-www-form-urlencoded bodies; flat parameters are enough here.
app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
  done(null, Object.fromEntries(new URLSearchParams(String(body))));
});
await app.register(idempotency, { receiver, problem: stripeErrorShape });

/** A Stripe-style error the handler answers itself: saved and replayed like a charge, as Stripe does. */
function invalid(reply: FastifyReply, param: string, message: string): FastifyReply {
  return reply.code(400).send({ error: { type: 'invalid_request_error', code: 'parameter_invalid_integer', param, message } });
}

app.post('/v1/charges', async (request: FastifyRequest<{ Body: Record<string, string> }>, reply) => {
  const context = idempotencyOf(request, receiver);
  const tx: Database | undefined = context?.tx;
  if (context === undefined || tx === undefined) throw new Error('the idempotency plugin runs every POST');
  const { amount, currency = 'usd', description } = request.body;
  if (amount === undefined || !/^[1-9][0-9]{0,8}$/.test(amount)) return invalid(reply, 'amount', 'Invalid positive integer');
  if (description === 'slow') await sleep(slowMs);
  const charge = { id: `ch_${randomBytes(12).toString('hex')}`, object: 'charge', amount: Number(amount), currency, description: description ?? null, created: Math.floor(Date.now() / 1000) };
  tx.prepare('INSERT INTO charges (id, idempotency_key, amount, currency, description, created) VALUES (?, ?, ?, ?, ?, ?)').run(
    charge.id,
    context.key,
    charge.amount,
    charge.currency,
    charge.description,
    charge.created,
  );
  return reply.code(200).send(charge);
});

await app.listen({ port, host: '127.0.0.1' });
const address = app.server.address();
process.stdout.write(`listening ${typeof address === 'object' && address !== null ? address.port : port}\n`);
