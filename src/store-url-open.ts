/**
 * What opening a store from a URL can fail with, and how such failures are worded: {@link StoreOpenError},
 * the unreachable-or-refused message, password redaction, and the PostgreSQL schema check. Re-exported by
 * `retrysafe/store-url`.
 *
 * @module
 */
import { ModuleError } from './core/errors.js';

/**
 * Thrown by {@link StoreTarget.open} when the store named by `url` cannot be opened: the server did not
 * answer or refused, the SQLite file or PostgreSQL schema an `'existing'` open requires is missing, or the
 * SQLite file cannot be opened. The message is one line naming the URL with its password redacted. The CLI
 * prints it and exits 2.
 */
export class StoreOpenError extends ModuleError<'store-open-failed'> {
  override readonly name = 'StoreOpenError';

  constructor(message: string, options?: { cause?: unknown }) {
    super('store-open-failed', message, options);
  }
}

/** The subset of a `pg` pool {@link requirePostgresSchema} queries through. */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * Checks that `schema` exists in the PostgreSQL database behind `pool`, creating nothing.
 *
 * @param url - the store URL, named (password redacted) in the failures
 * @throws {@link StoreOpenError} when the database cannot be reached, or when the schema does not exist
 *   (the message says to run `retrysafe migrate`)
 */
export async function requirePostgresSchema(pool: Queryable, schema: string, url: string): Promise<void> {
  let found: boolean;
  try {
    const { rows } = await pool.query('SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1', [schema]);
    found = rows.length > 0;
  } catch (error) {
    throw unreachableStore(url, error);
  }
  if (!found) {
    throw new StoreOpenError(`schema "${schema}" does not exist at ${redactUrl(url)}; create it with: retrysafe migrate --store URL --schema ${schema}`);
  }
}

/**
 * `url` with its password replaced by `***`, for messages; a value that is not a URL is returned as is.
 *
 * @example
 * ```ts
 * redactUrl('postgres://app:secret@db:5432/app'); // 'postgres://app:***@db:5432/app'
 * ```
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === '') return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** Error codes of a server that could not be reached at all. */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * The store at `url` failed while being opened: `cannot reach the store at URL: …` when it did not answer
 * (connection refused, unknown host, timed out), `the store at URL refused: …` otherwise (bad
 * credentials, no such database, permission denied).
 *
 * @param url - the store URL; its password is redacted in the message
 */
export function unreachableStore(url: string, cause: unknown): StoreOpenError {
  const reason = cause instanceof Error ? firstLine(cause.message) || connectionCode(cause) || cause.name : String(cause);
  const what = connectionCode(cause) === undefined ? `the store at ${redactUrl(url)} refused` : `cannot reach the store at ${redactUrl(url)}`;
  return new StoreOpenError(`${what}: ${reason}`, { cause });
}

/** The connection error code of `error`, or of the first of an `AggregateError`'s errors (Node tries every address). */
function connectionCode(error: unknown): string | undefined {
  if (error instanceof AggregateError) return connectionCode(error.errors[0]);
  // etcd3 reports a member it cannot connect to as gRPC status 14, UNAVAILABLE.
  if (error instanceof Error && error.constructor.name === 'GRPCUnavailableError') return 'UNAVAILABLE';
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) return code;
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause === undefined ? undefined : connectionCode(cause);
}

function firstLine(text: string): string {
  return text.split('\n', 1)[0]?.trim() ?? '';
}
