/**
 * One runtime statement of the PostgreSQL store, prepared or not, and how it runs.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';

/**
 * A statement run with parameters. With a `name` it is a prepared statement: `pg` parses it once per
 * connection, and PostgreSQL plans it once and then reuses a cached plan, where an unnamed statement is
 * parsed and planned on every execution. The name is derived from the text, so equal texts share it and
 * different schemas never collide.
 */
export interface Statement {
  readonly name: string | undefined;
  readonly text: string;
}

/** What a statement runs on: the pool, or one client inside a transaction. */
export interface Queryable {
  query<R extends pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>;
}

/**
 * The server's "now" in milliseconds since the epoch. `clock_timestamp()`, not `now()`: `now()` is the
 * start of the transaction, which in transactional mode began before the handler ran, so a lease
 * renewed by `checkpoint` would end early by the handler's run time and a completion would be stamped
 * (and expire) as of the transaction's start; inside the claim function it would also lag behind a
 * concurrent claimer's commit. Each statement reads it once (as an argument, or in an uncorrelated
 * sub-select, which PostgreSQL evaluates once), so one statement's decisions share one instant.
 */
const SERVER_NOW_MS = 'floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/** `now` for a statement: the parameter `$n` when the store was given a clock, else the server's. */
export function nowOf(parameter: string): string {
  return `COALESCE(${parameter}::bigint, ${SERVER_NOW_MS})`;
}

/** A statement for `text`, named (prepared once per connection) when `prepared` is true. */
export function statement(text: string, prepared: boolean): Statement {
  return Object.freeze({ name: prepared ? `retrysafe_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` : undefined, text });
}

// Hot path: docs/hot-path.md#postgresql-rows-and-queries
/**
 * Runs a {@link Statement} with its values. The query config inherits `name` and `text` from the statement
 * and holds only `values` of its own: node-postgres copies every config it is given, own property by own
 * property (`Object.getOwnPropertyDescriptors`), keeping its prototype, so one own property is the
 * cheapest config to copy.
 */
export function run<R extends pg.QueryResultRow>(db: Queryable, prepared: Statement, values: unknown[]): Promise<pg.QueryResult<R>> {
  const config = Object.create(prepared) as { values: unknown[] } & Statement;
  config.values = values;
  return db.query<R>(config);
}
