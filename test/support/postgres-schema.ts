/**
 * A throwaway PostgreSQL schema per test file: probes the server (CI fails, a local run skips loudly),
 * migrates a uniquely named schema, and drops it afterwards.
 */
import pg from 'pg';
import { migrate } from '../../src/postgres.js';
import { POSTGRES_URL, uniqueName } from './services.js';

export { postgresAvailable } from './services.js';

/** A migrated schema on its own pool. */
export interface TestSchema {
  readonly pool: pg.Pool;
  readonly schema: string;
  /** Empties the records table. */
  truncate(): Promise<void>;
  /** Drops the schema and ends the pool. */
  drop(): Promise<void>;
}

/** Creates and migrates a schema named `<prefix>_<pid>_<random>`. */
export async function createTestSchema(prefix: string, poolSize = 10): Promise<TestSchema> {
  const schema = uniqueName(prefix);
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: poolSize });
  // Tests terminate backends on purpose; an idle pooled connection dying must not crash the run.
  pool.on('error', () => undefined);
  await migrate({ pool, schema });
  return {
    pool,
    schema,
    async truncate() {
      await pool.query(`TRUNCATE "${schema}".records`);
    },
    async drop() {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}
