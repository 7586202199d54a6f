/**
 * `retrysafe/store-url`: one URL names an idempotency store, as the CLI's `--store` flag, the demo and an
 * application's configuration write it. Each scheme is one row of {@link STORE_SCHEMES}. A new store plugs
 * in with a row there and a member of {@link OpenedStore}; the compiler then asks every `switch` over
 * `scheme` (the CLI's commands, the demo server's wiring) for its case. `open` loads the driver with a
 * dynamic `import()`, so a program that never opens that store never loads its (optional) driver.
 *
 * | value | store |
 * |---|---|
 * | `memory:` | in-process memory store; lives and dies with the process |
 * | `sqlite:PATH` | SQLite file at PATH (created if missing when opened with `'create'`; required by `'existing'`), transactional, shared safely across processes; `?synchronous=normal` (the default) or `?synchronous=full` sets the store's `synchronous` option |
 * | `sqlite::memory:` | private in-memory SQLite database; transactional, dies with the process |
 * | `postgres://…`, `postgresql://…` | PostgreSQL (schema `retrysafe`, or `?schema=NAME`; migrated when opened with `'create'`, required by `'existing'`), transactional |
 * | `redis://…`, `rediss://…` | Redis (key prefix `retrysafe`, or `?prefix=NAME`); plain: it cannot commit with a business database (docs/redis.md) |
 * | `etcd://HOST:PORT[,HOST:PORT…]` | etcd v3, the members' client URLs (key prefix `retrysafe`, or `?prefix=NAME`); plain (docs/etcd.md) |
 * | `dynamodb://TABLE?region=R&endpoint=URL` | DynamoDB table TABLE (default `retrysafe`; created with TTL on when opened with `'create'`, required by `'existing'`), region and endpoint from the SDK's defaults unless given, `?partitionKey=`, `?sortKey=` (empty: none) and `?ttlAttribute=` as the table has them; credentials from the SDK's default chain; plain (docs/aws.md) |
 *
 * `schema` and `prefix` are retrysafe's own query parameters: they are taken out of the URL before it
 * reaches the driver. A SQLite value's query string (from its first `?`, so a PATH cannot hold one) takes
 * only `synchronous`.
 * Every message that names a URL names it with its password replaced by `***` ({@link redactUrl}).
 *
 * @module
 */
import { existsSync } from 'node:fs';
import type { Database } from 'better-sqlite3';
import { ModuleError } from './core/errors.js';
import { DEFAULT_SCHEMA, schemaNames } from './stores/postgres/schema.js';
import type { PostgresStore } from './stores/postgres/store.js';
import type { IdempotencyStore, TransactionalStore } from './core/store.js';
import { SQLITE_SYNCHRONOUS, type SqliteSynchronous } from './stores/sqlite/options.js';
import { etcdHosts } from './stores/etcd/hosts.js';
import { parseDynamodbUrl } from './stores/dynamodb/target.js';
import { requirePostgresSchema, StoreOpenError, unreachableStore } from './store-url-open.js';

export { redactUrl, requirePostgresSchema, StoreOpenError, unreachableStore, type Queryable } from './store-url-open.js';

/**
 * Thrown by {@link parseStoreUrl} for a value that names no known scheme or is malformed; the message
 * names the value and the supported schemes. The CLI exits 2 on it.
 */
export class StoreUrlError extends ModuleError<'store-url-invalid'> {
  override readonly name = 'StoreUrlError';

  constructor(
    /** The value as the user wrote it. */
    readonly url: string,
    reason: string,
  ) {
    super('store-url-invalid', `invalid --store ${JSON.stringify(url)}: ${reason}. Supported: ${supportedExamples()}`);
  }
}

/** A store as {@link StoreTarget.open} opened it, told apart by `scheme` so a caller can wire scheme-specific extras. */
export type OpenedStore =
  | {
      readonly scheme: 'memory';
      readonly transactional: false;
      readonly store: IdempotencyStore;
    }
  | {
      readonly scheme: 'sqlite';
      readonly transactional: true;
      /** Transactions hand out the `better-sqlite3` connection itself. */
      readonly store: TransactionalStore<Database>;
      /** The connection, for a command's own tables in the same file (and the same transactions). */
      readonly database: Database;
    }
  | {
      readonly scheme: 'postgres' | 'postgresql';
      readonly transactional: true;
      /** Transactions hand out the `pg` `PoolClient` they run on; `store.pool` serves a command's own tables. */
      readonly store: PostgresStore;
    }
  | {
      readonly scheme: 'redis' | 'rediss';
      /** Redis cannot commit together with a business database (docs/redis.md). */
      readonly transactional: false;
      readonly store: IdempotencyStore;
    }
  | {
      readonly scheme: 'etcd';
      /** etcd cannot commit together with a business database (docs/etcd.md). */
      readonly transactional: false;
      readonly store: IdempotencyStore;
    }
  | {
      readonly scheme: 'dynamodb';
      /** Opened from a URL, the DynamoDB store runs in plain mode (docs/aws.md). */
      readonly transactional: false;
      readonly store: IdempotencyStore;
    };

/** A parsed, not yet opened, store URL. */
export interface StoreTarget {
  /** Scheme without the colon, e.g. `"sqlite"`. */
  readonly scheme: OpenedStore['scheme'];
  /** The value as given. */
  readonly url: string;
  /**
   * `true` when the records outlive the process that opened the store (a file, a server), so a crashed
   * process restarted on the same target finds them again.
   */
  readonly durable: boolean;
  /**
   * `true` when the store opens as a {@link TransactionalStore}, so business writes can commit with the
   * record; `false` for a plain store, where a crash between the business write and `complete` re-executes
   * the operation once the lease expires.
   */
  readonly transactional: boolean;
  /** The `?schema=` of a PostgreSQL URL; `undefined` when it names none (the store then uses `retrysafe`). */
  readonly schema?: string | undefined;
  /** The URL for the driver: the value without retrysafe's own `schema` / `prefix` parameters. */
  readonly driverUrl: string;
  /**
   * Opens the store. `'create'` creates a missing SQLite file or PostgreSQL schema and migrates it, as the
   * store factories do; `'existing'` (every command that only reads or tidies) creates nothing and fails
   * when the file or schema is not there.
   *
   * @throws {@link StoreOpenError}, one line naming the URL with its password redacted, when the store
   *   cannot be reached or refuses, or when an `'existing'` file or schema is missing
   * @throws Node's `ERR_MODULE_NOT_FOUND` error when the driver package (`better-sqlite3`, `pg`, `ioredis`)
   *   is not installed
   */
  open(mode: OpenMode): Promise<OpenedStore>;
}

/** How {@link StoreTarget.open} treats a store that does not exist yet. */
export type OpenMode = 'create' | 'existing';

/** One row of the scheme table. */
export interface StoreScheme {
  /** Scheme without the colon. */
  readonly scheme: OpenedStore['scheme'];
  /** A valid example value, shown in errors and `--help`. */
  readonly example: string;
  /**
   * Parses what follows `scheme:`.
   * @throws {@link StoreUrlError} when the rest is malformed
   */
  parse(rest: string, url: string): StoreTarget;
}

/** The supported schemes, by name. */
export const STORE_SCHEMES: readonly StoreScheme[] = Object.freeze([
  {
    scheme: 'memory',
    example: 'memory:',
    parse(rest: string, url: string): StoreTarget {
      if (rest !== '') throw new StoreUrlError(url, 'memory: takes nothing after the colon');
      return {
        scheme: 'memory',
        url,
        driverUrl: url,
        durable: false,
        transactional: false,
        async open(): Promise<OpenedStore> {
          const { createMemoryStore } = await import('./stores/memory.js');
          return { scheme: 'memory', transactional: false, store: createMemoryStore() };
        },
      };
    },
  },
  {
    scheme: 'sqlite',
    example: 'sqlite:./idempotency.db',
    parse(rest: string, url: string): StoreTarget {
      const query = rest.indexOf('?');
      const path = query === -1 ? rest : rest.slice(0, query);
      if (path === '') throw new StoreUrlError(url, 'sqlite: needs a file path (or :memory:) after the colon');
      const synchronous = query === -1 ? undefined : sqliteSynchronous(url, rest.slice(query + 1));
      return {
        scheme: 'sqlite',
        url,
        driverUrl: url,
        durable: path !== ':memory:',
        transactional: true,
        async open(mode: OpenMode): Promise<OpenedStore> {
          const existing = mode === 'existing' && path !== ':memory:';
          if (existing && !existsSync(path)) throw new StoreOpenError(`the SQLite file ${path} does not exist (check --store ${url})`);
          // Loaded on demand so commands that never open a store do not load the native driver.
          const { createSqliteStore } = await import('./stores/sqlite/index.js');
          try {
            const store = createSqliteStore({ path, migrate: !existing, ...(synchronous !== undefined && { synchronous }) });
            return { scheme: 'sqlite', transactional: true, store, database: store.database };
          } catch (error) {
            throw new StoreOpenError(`cannot open the SQLite store ${url}: ${(error as Error).message.replace(/^retrysafe: /, '')}`, { cause: error });
          }
        },
      };
    },
  },
  ...(['postgres', 'postgresql'] as const).map(
    (scheme): StoreScheme => ({
      scheme,
      example: `${scheme}://user@127.0.0.1:5432/app`,
      parse(_rest: string, url: string): StoreTarget {
        requireServerUrl(url, scheme, 'a database name, e.g. /app');
        const [driverUrl, named] = takeParameter(url, 'schema');
        const schema = named ?? DEFAULT_SCHEMA;
        try {
          schemaNames('schema', schema);
        } catch (error) {
          throw new StoreUrlError(url, `?schema= ${(error as Error).message.replace(/^retrysafe: option "schema" /, '')}`);
        }
        return {
          scheme,
          url,
          driverUrl,
          schema: named,
          durable: true,
          transactional: true,
          async open(mode: OpenMode): Promise<OpenedStore> {
            // Loaded on demand so commands that never open PostgreSQL do not load `pg`.
            const { createPostgresStore, migrate } = await import('./postgres.js');
            if (mode === 'create') {
              // Migrating is idempotent and serialized by an advisory lock, so every open can afford it.
              await migrate({ connectionString: driverUrl, schema }).catch((error: unknown) => {
                throw unreachableStore(url, error);
              });
            }
            const store = createPostgresStore({ connectionString: driverUrl, schema });
            if (mode === 'existing') {
              try {
                await requirePostgresSchema(store.pool, schema, url);
              } catch (error) {
                await store.close();
                throw error;
              }
            }
            return { scheme, transactional: true, store };
          },
        };
      },
    }),
  ),
  ...(['redis', 'rediss'] as const).map(
    (scheme): StoreScheme => ({
      scheme,
      example: `${scheme}://127.0.0.1:6379`,
      parse(_rest: string, url: string): StoreTarget {
        requireServerUrl(url, scheme, undefined);
        const [driverUrl, prefix] = takeParameter(url, 'prefix');
        if (prefix !== undefined && (prefix === '' || /[{}]/.test(prefix))) {
          throw new StoreUrlError(url, '?prefix= must be non-empty and hold no "{" or "}"');
        }
        return {
          scheme,
          url,
          driverUrl,
          durable: true,
          transactional: false,
          async open(): Promise<OpenedStore> {
            const { openRedisStore } = await import('./stores/redis/index.js');
            const store = await openRedisStore(driverUrl, prefix === undefined ? {} : { prefix }).catch((error: unknown) => {
              throw unreachableStore(url, error);
            });
            return { scheme, transactional: false, store };
          },
        };
      },
    }),
  ),
  {
    scheme: 'etcd',
    example: 'etcd://127.0.0.1:2379',
    parse(_rest: string, url: string): StoreTarget {
      // Not parsed as a URL: a list of members (`h1:2379,h2:2379`) is no valid URL authority.
      const query = url.indexOf('?');
      const driverUrl = query === -1 ? url : url.slice(0, query);
      const parameters = [...new URLSearchParams(query === -1 ? '' : url.slice(query + 1))];
      if (parameters.some(([name]) => name !== 'prefix')) throw new StoreUrlError(url, 'an etcd: value takes one query parameter, ?prefix=NAME');
      const prefix = parameters.at(-1)?.[1];
      if (prefix === '') throw new StoreUrlError(url, '?prefix= must be non-empty');
      try {
        etcdHosts(driverUrl);
      } catch {
        throw new StoreUrlError(url, 'etcd: needs the members as etcd://HOST:PORT[,HOST:PORT…]');
      }
      return {
        scheme: 'etcd',
        url,
        driverUrl,
        durable: true,
        transactional: false,
        async open(): Promise<OpenedStore> {
          const { openEtcdStore } = await import('./stores/etcd/index.js');
          const store = await openEtcdStore(driverUrl, prefix === undefined ? {} : { prefix }).catch((error: unknown) => {
            throw unreachableStore(url, error);
          });
          return { scheme: 'etcd', transactional: false, store };
        },
      };
    },
  },
  {
    scheme: 'dynamodb',
    example: 'dynamodb://TABLE?region=eu-west-1',
    parse(_rest: string, url: string): StoreTarget {
      const parsed = parseDynamodbUrl(url);
      if (typeof parsed === 'string') throw new StoreUrlError(url, parsed);
      return {
        scheme: 'dynamodb',
        url,
        driverUrl: url,
        durable: true,
        transactional: false,
        async open(mode: OpenMode): Promise<OpenedStore> {
          // Loaded on demand so commands that never open DynamoDB do not load the AWS SDK.
          const { openDynamodbStore, clientFor } = await import('./stores/dynamodb/url.js');
          const { createDynamodbTable, tableExists } = await import('./stores/dynamodb/table.js');
          const admin = clientFor(parsed);
          try {
            if (mode === 'create') {
              await createDynamodbTable(admin, parsed);
            } else if (!(await tableExists(admin, parsed.table))) {
              throw new StoreOpenError(`the DynamoDB table ${parsed.table} does not exist (check --store ${url}); create it with: retrysafe migrate --store ${url}`);
            }
          } catch (error) {
            throw error instanceof StoreOpenError ? error : unreachableStore(url, error);
          } finally {
            admin.destroy();
          }
          return { scheme: 'dynamodb', transactional: false, store: openDynamodbStore(parsed) };
        },
      };
    },
  },
]);

/**
 * Parses a store URL such as `sqlite:./data.db`, `sqlite::memory:`, `memory:`,
 * `postgres://user@host:5432/db` or `redis://host:6379`. Parsing checks the shape only; a server that is
 * down or refuses shows when the target is opened.
 *
 * @throws {@link StoreUrlError} for an unknown scheme, a value without a scheme, or a malformed rest
 * @example
 * ```ts
 * const target = parseStoreUrl('sqlite:/tmp/idempotency.db');
 * const opened = await target.open(); // opened.transactional === true
 * ```
 */
export function parseStoreUrl(url: string): StoreTarget {
  const colon = url.indexOf(':');
  if (colon <= 0) throw new StoreUrlError(url, 'expected SCHEME:…');
  const name = url.slice(0, colon).toLowerCase();
  const scheme = STORE_SCHEMES.find((row) => row.scheme === name);
  if (!scheme) throw new StoreUrlError(url, `unknown scheme "${name}:"`);
  return scheme.parse(url.slice(colon + 1), url);
}

/**
 * Checks a server URL (`scheme://host…`): it must parse as a URL with a host and, when `path` says what is
 * expected, a non-empty path.
 *
 * @throws {@link StoreUrlError} when it does not
 */
function requireServerUrl(url: string, scheme: string, path: string | undefined): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new StoreUrlError(url, `not a valid ${scheme}:// URL`);
  }
  // libpq-style URLs may name a Unix socket directory in `?host=` instead of a host.
  const host = parsed.hostname !== '' || parsed.searchParams.has('host');
  if (!url.slice(scheme.length + 1).startsWith('//') || !host) {
    throw new StoreUrlError(url, `${scheme}: needs a host, as in ${scheme}://HOST:PORT`);
  }
  if (path !== undefined && (parsed.pathname === '' || parsed.pathname === '/')) {
    throw new StoreUrlError(url, `${scheme}: needs ${path}`);
  }
}

/**
 * Splits retrysafe's own query parameter `name` off a server URL: the URL without it (as given when it is
 * absent), and its value (`undefined` when absent; the last one when repeated).
 */
function takeParameter(url: string, name: string): [string, string | undefined] {
  const parsed = new URL(url);
  const values = parsed.searchParams.getAll(name);
  if (values.length === 0) return [url, undefined];
  parsed.searchParams.delete(name);
  return [parsed.toString(), values[values.length - 1]];
}

/**
 * The `synchronous` parameter of a SQLite value's query string (`synchronous=normal` or `synchronous=full`).
 *
 * @throws {@link StoreUrlError} for another parameter, a repeated one, or another value
 */
function sqliteSynchronous(url: string, query: string): SqliteSynchronous {
  const parameters = [...new URLSearchParams(query)];
  const [name, value] = parameters[0] ?? [];
  if (parameters.length !== 1 || name !== 'synchronous') {
    throw new StoreUrlError(url, 'a sqlite: value takes one query parameter, ?synchronous=normal or ?synchronous=full');
  }
  const known = SQLITE_SYNCHRONOUS.find((level) => level === value);
  if (known === undefined) throw new StoreUrlError(url, `?synchronous= must be normal or full, got ${JSON.stringify(value)}`);
  return known;
}

function supportedExamples(): string {
  return STORE_SCHEMES.map((row) => row.example).join(', ');
}
