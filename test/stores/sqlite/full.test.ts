/**
 * Plain-mode completions on SQLite when the database is full (the shared suite in ../completion-faults.ts):
 * the store's connection has a `max_page_count` (https://www.sqlite.org/pragma.html#pragma_max_page_count),
 * and once every claim is written ballast rows take every page left, so each completion fails with
 * `SQLITE_FULL`; deleting the ballast frees the pages again, as freeing disk space would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { createSqliteStore } from '../../../src/stores/sqlite/index.js';
import { completionFaultSuite } from '../completion-faults.js';

const dir = mkdtempSync(join(tmpdir(), 'rs-sqlite-full-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Pages the file may grow by (4 KiB each): room for the claims, not for the ballast. */
const ROOM_PAGES = 1_000;

/** Inserts `bytes`-long ballast rows until SQLite answers SQLITE_FULL. */
function fill(database: Database.Database, bytes: number): void {
  const insert = database.prepare('INSERT INTO ballast (b) VALUES (?)');
  const row = Buffer.alloc(bytes, 1);
  for (;;) {
    try {
      insert.run(row);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'SQLITE_FULL') return;
      throw error;
    }
  }
}

completionFaultSuite('SQLite at max_page_count (SQLITE_FULL)', () => {
  const database = new Database(join(dir, `${randomUUID()}.db`));
  database.pragma('journal_mode = WAL');
  database.exec('CREATE TABLE ballast (b BLOB NOT NULL)');
  const store = createSqliteStore({ database });
  const pages = database.pragma('page_count', { simple: true }) as number;
  database.pragma(`max_page_count = ${pages + ROOM_PAGES}`);
  return Promise.resolve({
    store,
    fault: {
      inject() {
        // Large rows first, then small ones for the last free pages.
        for (const bytes of [65_536, 4_096, 512]) fill(database, bytes);
        return Promise.resolve();
      },
      lift() {
        database.exec('DELETE FROM ballast');
        return Promise.resolve();
      },
    },
    close: async () => {
      await store.close();
      database.close();
    },
  });
});
