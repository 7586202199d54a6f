// Ceiling column: bare Fastify behind the least idempotency layer on PostgreSQL, the claim first (for new keys) (see ./_ceiling.mjs).
import { ceilingColumn } from './_ceiling.mjs';

export const { meta, start } = ceilingColumn('postgres-claim-first', 'postgres');
