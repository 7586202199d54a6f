// Ceiling column: bare Fastify behind the least idempotency layer on PostgreSQL, transactional: the claim,
// then BEGIN, the charge INSERT, the save UPDATE and COMMIT (see ./_ceiling.mjs).
import { ceilingColumn } from './_ceiling.mjs';

export const { meta, start } = ceilingColumn('postgres-tx', 'postgres');
