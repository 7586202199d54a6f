// Ceiling column: bare Fastify behind the least idempotency layer on PostgreSQL, transactional (claim, then BEGIN, charge INSERT, save UPDATE, COMMIT) (see ./_ceiling.mjs).
import { startCeiling } from './_ceiling.mjs';

export const meta = {
  id: 'ceiling-postgres-tx',
  label: 'ceiling: bare fastify + the least layer on postgres-tx (measurement only, not a product)',
  framework: 'fastify',
  store: 'postgres',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify'],
};

export function start(ctx) {
  return startCeiling('postgres-tx', ctx);
}
