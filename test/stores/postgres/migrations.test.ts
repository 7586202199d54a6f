/**
 * The one sequence of PostgreSQL migrations, gathered from the modules that own them: released migrations
 * keep their numbers, names and SQL, the numbers stay one gapless sequence, and a database migrated before
 * the modules owned their migrations upgrades without re-running any of them.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { dumpSchema } from '../../../scripts/schema.js';
import { EVENTS_MIGRATIONS } from '../../../src/events/migrations/postgres/index.js';
import { INBOX_MIGRATIONS } from '../../../src/messaging/inbox/migrations/postgres/index.js';
import { OUTBOX_MIGRATIONS } from '../../../src/messaging/outbox/migrations/postgres/index.js';
import { SESSIONS_MIGRATIONS } from '../../../src/sessions/migrations/postgres/index.js';
import { migrate } from '../../../src/postgres.js';
import type { Migration } from '../../../src/stores/postgres/migration.js';
import { IDEMPOTENCY_MIGRATIONS } from '../../../src/stores/postgres/migrations/idempotency.js';
import { MIGRATIONS } from '../../../src/migrate.js';
import { SchemaTooNewError } from '../../../src/core/errors.js';
import { sequence } from '../../../src/stores/postgres/migration.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { POSTGRES_URL, uniqueName } from '../../support/services.js';

/** Every released migration as it shipped: its SQL for the schema `"retrysafe"`, by SHA-256. Append-only. */
const RELEASED = [
  { version: 1, name: '0001_init', sha256: '820d6af5906f1e9fbda2702adb5394a8b346e6f2ae0d97920d8d1d4cc592eced' },
  { version: 2, name: '0002_inbox', sha256: '19bd094c49c42a4fb9a9e7bb5ef7bb08d18d3f306162bb931b31ee006a1bf778' },
  { version: 3, name: '0003_outbox', sha256: '46b1dad250cbbd8a9061fee7c30c2f81bf2d0b2237e74232d2e066a129fa5379' },
  { version: 4, name: '0004_recovery_points', sha256: 'e7f7b5dea99636edaef017c3b4af0ed7408114d1816bf86878556858e1e975aa' },
  { version: 5, name: '0005_sessions', sha256: 'c0b9e47e9dcb1a32608d087f52df661cec1029b38a6c32422d69438348fb2c92' },
  { version: 6, name: '0006_waiters', sha256: '368eb059fbf74c09d92b2711f6e571c7e8dc56572a15929fdc90cc19b847f8ea' },
  { version: 7, name: '0007_outbox_waiting', sha256: 'af7de76c18c1450111a35b97e4d7860bc5615f0abe998b9499eb00909f63e788' },
  { version: 8, name: '0008_drop_claim_guard', sha256: '0963a00a976fb1b20390fd0124f25393414db6c95d9048a5443aebf696a3ba51' },
  { version: 9, name: '0009_claim_owner', sha256: '4b47babf1f12d3d4bcc4c1d62556265226c273298c2f4602c788acb9c37d2d31' },
  { version: 10, name: '0010_sessions_client_id_c', sha256: '6115dca163a247a896a5cd843b013e90bbe5ba3b63dbd49ce6109f2b991ae026' },
  { version: 11, name: '0011_inbox_redrive_requested_at', sha256: '3698f1aac274274b50284ac5acd650348109aac88725d0f46c58689e15e61d28' },
];

/** The migrations `fixtures/schema-v9.sql` records as applied: the first nine. */
const FIXTURE = RELEASED.slice(0, 9);

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');
const names = (list: readonly Migration[]): string[] => list.map((m) => m.name);

describe('the PostgreSQL migration sequence', () => {
  it('keeps every released migration as it shipped: number, name and SQL', () => {
    const shipped = MIGRATIONS.slice(0, RELEASED.length).map((m) => ({ version: m.version, name: m.name, sha256: sha256(m.sql('"retrysafe"')) }));
    expect(shipped).toEqual(RELEASED);
  });

  it('gathers each module’s own migrations into one list ordered by number', () => {
    expect(names(IDEMPOTENCY_MIGRATIONS).slice(0, 5)).toEqual(['0001_init', '0004_recovery_points', '0006_waiters', '0008_drop_claim_guard', '0009_claim_owner']);
    expect(names(INBOX_MIGRATIONS).slice(0, 2)).toEqual(['0002_inbox', '0011_inbox_redrive_requested_at']);
    expect(names(OUTBOX_MIGRATIONS).slice(0, 2)).toEqual(['0003_outbox', '0007_outbox_waiting']);
    expect(names(SESSIONS_MIGRATIONS)[0]).toBe('0005_sessions');
    expect(names(EVENTS_MIGRATIONS)[0]).toBe('0012_events');
    const modules = [IDEMPOTENCY_MIGRATIONS, INBOX_MIGRATIONS, OUTBOX_MIGRATIONS, SESSIONS_MIGRATIONS, EVENTS_MIGRATIONS];
    expect(MIGRATIONS.map((m) => m.version)).toEqual(Array.from({ length: MIGRATIONS.length }, (_, at) => at + 1));
    expect([...names(MIGRATIONS)].sort()).toEqual(modules.flatMap(names).sort());
  });

  it('refuses a number two modules took, a gap, or a name that does not start with its number', () => {
    const step = (version: number, name: string): Migration => ({ version, name, sql: () => '' });
    expect(sequence([step(2, '0002_b')], [step(1, '0001_a')]).map((m) => m.name)).toEqual(['0001_a', '0002_b']);
    expect(() => sequence([step(1, '0001_a'), step(2, '0002_b')], [step(2, '0002_c')])).toThrow(/0002_c \(version 2\) is out of sequence: expected version 3/);
    expect(() => sequence([step(1, '0001_a'), step(3, '0003_c')])).toThrow(/0003_c .*expected version 2/);
    expect(() => sequence([step(1, '0002_a')])).toThrow(/0002_a \(version 1\) is out of sequence/);
  });
});

const available = await postgresAvailable();

describe.runIf(available)('a schema migrated before the modules owned their migrations', () => {
  it('migrates without re-running any migration and ends with the schema of docs/schema.sql', async () => {
    const schema = uniqueName('rs_pgv9');
    const fixture = await readFile(new URL('fixtures/schema-v9.sql', import.meta.url), 'utf8');
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    const ledger = async (): Promise<{ version: number; name: string; applied_at: Date }[]> =>
      (await pool.query<{ version: number; name: string; applied_at: Date }>(`SELECT version, name, applied_at FROM "${schema}".schema_migrations ORDER BY version`)).rows;
    try {
      // The dump sets session options (search_path, check_function_bodies): load it on a connection of its own.
      const loader = new pg.Client({ connectionString: POSTGRES_URL });
      await loader.connect();
      try {
        await loader.query(fixture.replaceAll('rs_fixture_v9', schema));
      } finally {
        await loader.end();
      }
      const before = await ledger();
      expect(before.map(({ version, name }) => ({ version, name }))).toEqual(FIXTURE.map(({ version, name }) => ({ version, name })));

      const later = MIGRATIONS.filter((m) => m.version > FIXTURE.length);
      expect(await migrate({ pool, schema })).toEqual({ schema, applied: names(later), version: MIGRATIONS.length });
      const after = await ledger();
      expect(after.slice(0, FIXTURE.length)).toEqual(before);
      expect(after.map((row) => row.name)).toEqual(names(MIGRATIONS));
      expect(await dumpSchema(schema, POSTGRES_URL)).toBe(await readFile(new URL('../../../docs/schema.sql', import.meta.url), 'utf8'));
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});

describe.runIf(available)('a schema migrated by a newer release', () => {
  it('is refused with SchemaTooNewError, and nothing is applied', async () => {
    const schema = uniqueName('rs_pgnew');
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    const future = MIGRATIONS.length + 3;
    try {
      await pool.query(`CREATE SCHEMA "${schema}"`);
      await pool.query(`CREATE TABLE "${schema}".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      await pool.query(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'from_the_future')`, [future]);

      const refused = await migrate({ pool, schema }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(SchemaTooNewError);
      expect(refused).toMatchObject({ code: 'store-schema-too-new', version: future, known: MIGRATIONS.length });
      expect((refused as Error).message).toBe(
        `retrysafe: schema "${schema}" was migrated to version ${future} by a newer retrysafe; this release knows up to ${MIGRATIONS.length}`,
      );
      const tables = await pool.query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [schema]);
      expect(tables.rows.map((row) => row.table_name)).toEqual(['schema_migrations']);
      const ledger = await pool.query<{ version: number }>(`SELECT version FROM "${schema}".schema_migrations`);
      expect(ledger.rows).toEqual([{ version: future }]);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
