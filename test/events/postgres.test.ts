/**
 * The PostgreSQL event store on the real server, in a migrated schema of this file's own: the shared
 * behaviour (concurrent appenders on a pool of ten), and a child process killed between the append's
 * statements and its COMMIT.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresEventStore } from '../../src/events/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { POSTGRES_URL } from '../support/services.js';
import { eventStoreBehaviour } from './behaviour.js';
import { crashBeforeCommit } from './crash.js';

const available = await postgresAvailable();

if (available) {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema('rs_events');
  });
  afterAll(async () => {
    await db.drop();
  });

  eventStoreBehaviour(
    'postgres',
    async () => {
      await db.pool.query(`TRUNCATE "${db.schema}".events`);
      return { store: createPostgresEventStore({ pool: db.pool, schema: db.schema }), close: () => Promise.resolve() };
    },
    true,
  );

  describe('postgres event store: crash before COMMIT', () => {
    it('leaves nothing of an append whose process died before COMMIT; the retry appends it once', async () => {
      await db.pool.query(`TRUNCATE "${db.schema}".events`);
      await crashBeforeCommit('postgres', POSTGRES_URL, db.schema);
      const store = createPostgresEventStore({ pool: db.pool, schema: db.schema });
      // The dead backend's transaction (and its advisory lock) went with its connection.
      expect(await store.read('crash')).toEqual([]);
      const retry = await store.appendOnce('crash', [{ type: 'Crashed', data: { n: 1 } }], { expectedVersion: 'any', idempotencyKey: 'crash-key' });
      expect(retry.events.map((e) => [e.version, e.status])).toEqual([[0, 'appended']]);
      expect(await store.read('crash')).toHaveLength(1);
    });
  });
}
