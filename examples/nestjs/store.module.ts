import { Module } from '@nestjs/common';
import { createSqliteStore, type SqliteStore } from 'retrysafe/sqlite';

/** Injection token of the SQLite store; its connection also holds the `payments` table. */
export const STORE = Symbol('store');

function openStore(): SqliteStore {
  const store = createSqliteStore({ path: process.env['SQLITE_PATH'] ?? ':memory:' });
  store.database.exec('CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, idempotency_key TEXT NOT NULL, amount INTEGER NOT NULL)');
  return store;
}

@Module({ providers: [{ provide: STORE, useFactory: openStore }], exports: [STORE] })
export class StoreModule {}
