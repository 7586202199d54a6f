// Ceiling column: bare Fastify behind the least idempotency layer on the memory store (see ./_ceiling.mjs).
import { startCeiling } from './_ceiling.mjs';

export const meta = {
  id: 'ceiling-memory',
  label: 'ceiling: bare fastify + the least layer on memory (measurement only, not a product)',
  framework: 'fastify',
  store: 'memory',
  baseline: 'bare-fastify',
  idempotent: false,
  packages: ['fastify'],
};

export function start(ctx) {
  return startCeiling('memory', ctx);
}
