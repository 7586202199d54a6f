// Ceiling column: bare Fastify behind the least idempotency layer on one Map (see ./_ceiling.mjs).
import { ceilingColumn } from './_ceiling.mjs';

export const { meta, start } = ceilingColumn('memory', 'memory');
