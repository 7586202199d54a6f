// Ceiling column: bare Fastify behind the least idempotency layer on PostgreSQL, the read first (for replays) (see ./_ceiling.mjs).
import { ceilingColumn } from './_ceiling.mjs';

export const { meta, start } = ceilingColumn('postgres-read-first', 'postgres');
