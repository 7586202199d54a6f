// Ceiling column: bare Fastify behind the least idempotency layer on Redis (see ./_ceiling.mjs).
import { ceilingColumn } from './_ceiling.mjs';

export const { meta, start } = ceilingColumn('redis', 'redis');
