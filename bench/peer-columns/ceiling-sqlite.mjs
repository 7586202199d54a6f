// Ceiling column: bare Fastify behind the least idempotency layer on the sqlite store (see ./_ceiling.mjs).
import { startCeiling } from './_ceiling.mjs';

export const meta = {
  id: 'ceiling-sqlite',
  label: 'ceiling: bare fastify + the least layer on sqlite (measurement only, not a product)',
  framework: 'fastify',
  store: 'sqlite',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify'],
};

export function start(ctx) {
  return startCeiling('sqlite', ctx);
}
