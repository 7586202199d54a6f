/** Shared helpers of the messaging tests: a PostgreSQL schema with a business table. */
import type pg from 'pg';
import type { MessageHandler } from '../../src/messaging/inbox/index.js';
import { createTestSchema, type TestSchema } from './postgres-schema.js';

/** A migrated schema plus `<schema>.effects (consumer, message_id)`, without a unique key, so doubles show. */
export interface EffectsSchema extends TestSchema {
  readonly count: (consumer: string, messageId: string) => Promise<number>;
  readonly write: (tx: pg.ClientBase, consumer: string, messageId: string) => Promise<void>;
}

export async function createEffectsSchema(prefix: string, poolSize = 10): Promise<EffectsSchema> {
  const db = await createTestSchema(prefix, poolSize);
  const table = `"${db.schema}".effects`;
  await db.pool.query(`CREATE TABLE ${table} (consumer text NOT NULL, message_id text NOT NULL)`);
  return {
    ...db,
    count: async (consumer, messageId) => {
      const result = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE consumer = $1 AND message_id = $2`, [
        consumer,
        messageId,
      ]);
      return result.rows[0]?.n ?? 0;
    },
    write: async (tx, consumer, messageId) => {
      await tx.query(`INSERT INTO ${table} (consumer, message_id) VALUES ($1, $2)`, [consumer, messageId]);
    },
  };
}

/**
 * A handler that counts its runs per message id in `runs` and writes the message's effect row for
 * `consumer` in the inbox's transaction.
 */
export function writeEffect(db: EffectsSchema, runs: Map<string, number>, consumer = 'billing'): MessageHandler<pg.PoolClient> {
  return async (message, tx) => {
    runs.set(message.id ?? '', (runs.get(message.id ?? '') ?? 0) + 1);
    await db.write(tx, consumer, message.id ?? '');
  };
}
