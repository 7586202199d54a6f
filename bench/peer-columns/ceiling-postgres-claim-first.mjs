// Ceiling column: bare Fastify behind the least idempotency layer on the postgres-claim-first store (see ./_ceiling.mjs).
import { startCeiling } from './_ceiling.mjs';

export const meta = {
  id: 'ceiling-postgres-claim-first',
  label: 'ceiling: bare fastify + the least layer on postgres-claim-first (measurement only, not a product)',
  framework: 'fastify',
  store: 'postgres',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify'],
};

export function start(ctx) {
  return startCeiling('postgres-claim-first', ctx);
}
