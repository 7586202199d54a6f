/**
 * The fenced write pattern for SQL resources: an `UPDATE` that applies only when the caller's fencing
 * token is larger than the one the row last accepted, shared by the PostgreSQL and SQLite helpers.
 *
 * @module
 */
import { describe } from './validate.js';

/**
 * What a fenced update writes. The row is found by `idColumn = id`; its fence column (`fenceColumn`, an
 * integer column, `bigint NOT NULL DEFAULT 0` in PostgreSQL, `INTEGER NOT NULL DEFAULT 0` in SQLite) holds
 * the largest fencing token that wrote it.
 */
export interface FencedUpdate {
  /** The table (a plain identifier: letters, digits, `_`; or `schema.table`). */
  readonly table: string;
  /** The row's key value. */
  readonly id: string | number | bigint;
  /** Columns (plain identifiers) and their new values. */
  readonly set: Readonly<Record<string, unknown>>;
  /** The caller's fencing token (`claim.fencingToken`): a decimal integer. */
  readonly fencingToken: string;
  /** @defaultValue 'id' */
  readonly idColumn?: string;
  /** @defaultValue 'fence' */
  readonly fenceColumn?: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

function quoted(name: string, option: string): string {
  if (typeof name !== 'string' || !name.split('.').every((part) => IDENTIFIER.test(part)) || name.split('.').length > 2) {
    throw new TypeError(`retrysafe: fencedUpdate ${option} must be a plain SQL identifier (letters, digits, "_"), got ${describe(name)}`);
  }
  return name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/**
 * The statement of `update` with placeholders from `placeholder(n)` (n from 1): `UPDATE t SET c1 = …, fence
 * = <token> WHERE id = <id> AND fence < <token>`, and its values in order. The token is bound as a BigInt.
 *
 * @throws TypeError when a name is not a plain identifier, `set` is empty or names the fence column, or the
 *   token is not a decimal integer
 */
export function fencedUpdateStatement(update: FencedUpdate, placeholder: (n: number) => string): { text: string; values: unknown[] } {
  if (typeof update.fencingToken !== 'string' || !/^\d{1,19}$/.test(update.fencingToken)) {
    throw new TypeError(`retrysafe: fencedUpdate fencingToken must be a decimal integer (claim.fencingToken), got ${describe(update.fencingToken)}`);
  }
  const fence = quoted(update.fenceColumn ?? 'fence', 'fenceColumn');
  const columns = Object.keys(update.set);
  if (columns.length === 0) throw new TypeError('retrysafe: fencedUpdate set must name at least one column');
  const assignments = columns.map((column, i) => {
    const name = quoted(column, `set column ${JSON.stringify(column)}`);
    if (name === fence) throw new TypeError(`retrysafe: fencedUpdate set must not name the fence column ${fence}`);
    return `${name} = ${placeholder(i + 1)}`;
  });
  const token = placeholder(columns.length + 1);
  const id = placeholder(columns.length + 2);
  return {
    text: `UPDATE ${quoted(update.table, 'table')} SET ${assignments.join(', ')}, ${fence} = ${token} WHERE ${quoted(update.idColumn ?? 'id', 'idColumn')} = ${id} AND ${fence} < ${token}`,
    values: [...columns.map((column) => update.set[column]), BigInt(update.fencingToken), update.id],
  };
}
