// Ceiling column: bare Fastify behind the least idempotency layer on the redis store (see ./_ceiling.mjs).
import { startCeiling } from './_ceiling.mjs';

export const meta = {
  id: 'ceiling-redis',
  label: 'ceiling: bare fastify + the least layer on redis (measurement only, not a product)',
  framework: 'fastify',
  store: 'redis',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify'],
};

export function start(ctx) {
  return startCeiling('redis', ctx);
}
