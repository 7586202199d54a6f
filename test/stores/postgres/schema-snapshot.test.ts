/**
 * docs/schema.sql is the schema the migrations leave: regenerated here and compared, so a new migration
 * without `npm run schema` fails the suite.
 */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { schemaSnapshot } from '../../../scripts/schema.js';
import { POSTGRES_URL } from '../../support/services.js';
import { postgresAvailable } from '../../support/postgres-schema.js';

const available = await postgresAvailable();

describe.runIf(available)('docs/schema.sql', () => {
  it('matches what the migrations produce (run `npm run schema` after adding a migration)', async () => {
    const committed = await readFile(new URL('../../../docs/schema.sql', import.meta.url), 'utf8');
    const generated = await schemaSnapshot(POSTGRES_URL);
    expect(generated).toBe(committed);
    // The one claim function, as migration 0013 left it, and no guard function since 0008.
    expect(generated).toContain('CREATE FUNCTION retrysafe.claim(');
    expect(generated).not.toContain('require_empty_transaction');
  });
});
