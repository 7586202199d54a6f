/**
 * `retrysafe console --store URL [--port N] [--host H] [--allowed-host NAME]… [--token T] [--allow-actions]
 * [--sessions-table T | --sessions-prefix P] [--sample-every 5s] [--metrics URL]`: serves the operator console, a web UI over the store: keys
 * by state with search by scope and key, one record in full with a fenced release of a stuck key, and —
 * where the database holds their tables (PostgreSQL; the inbox on SQLite too) — inbox dead letters with
 * redrive and the outbox backlog with redrive of its dead letters. Client sessions are listed from the
 * store's database too: the `sessions` table of the PostgreSQL schema, the SQLite file's `--sessions-table`
 * (default `retrysafe_sessions`) when it is there, and the Redis keys under `--sessions-prefix` (default
 * `retrysafe-sessions`). Every `--sample-every` it samples the store's figures for the trends view
 * (the last hour, kept in the console's memory), and with `--metrics` scrapes a Prometheus text endpoint —
 * the receiver's instruments through OpenTelemetry's Prometheus exporter, or `retrysafe gateway`'s admin
 * `/metrics` — for request rates, replay and 409 ratios and latency quantiles.
 *
 * It listens on 127.0.0.1 unless `--host` says otherwise; any other host requires `--token`, which every
 * API request must then carry as `Authorization: Bearer TOKEN` (open the UI at `http://HOST:PORT/#token=TOKEN`,
 * as the startup line says; on `--host 0.0.0.0` or `::` that line names one of the machine's addresses).
 * It answers only requests whose `Host` header names it — `localhost`, `127.0.0.1`, `[::1]`, the `--host`
 * it listens on, the address a connection arrived on, or a name given with `--allowed-host` (repeatable;
 * e.g. the name a reverse proxy forwards) — and answers others 421, so a DNS-rebinding page cannot use it.
 * Without `--allow-actions` the console is read-only: release and redrive answer 403. It opens the
 * store as it is (creates no file, schema or table) and runs until interrupted.
 *
 * Exit codes: 0 stopped by SIGINT/SIGTERM; 2 usage error (a non-local `--host` without `--token`, an
 * `--allowed-host` that is no host name or address, a sessions flag of another store, a `--metrics` that is
 * no http(s) URL), store unreachable
 * or missing, port in use.
 *
 * @module
 */
import type { Server } from 'node:http';
import { networkInterfaces } from 'node:os';
import { InvalidArgumentError, type Command } from 'commander';
import { allowedHostName } from '../console/host-check.js';
import type { ConsoleOptions } from '../console/server.js';
import { CliFailure } from './failure.js';
import { loadPeer } from './peer.js';
import { durationOption, integerFlag, storeFlag } from './store-flag.js';
import { redactUrl, type OpenedStore, type StoreTarget } from '../store-url.js';

interface ConsoleFlags {
  readonly store: StoreTarget;
  readonly port: number;
  readonly host: string;
  readonly allowedHost: readonly string[];
  readonly token?: string;
  readonly allowActions?: boolean;
  readonly sessionsTable?: string;
  readonly sessionsPrefix?: string;
  readonly sampleEvery: number;
  readonly metrics?: string;
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '::1']);

/** Adds the `console` command to `program`. */
export function register(program: Command): void {
  program
    .command('console')
    .description('Serve the operator console: keys, stuck leases, inbox dead letters and the outbox backlog.')
    .requiredOption('--store <url>', 'idempotency store, e.g. postgres://user@127.0.0.1:5432/app', storeFlag)
    .option('--port <n>', 'TCP port (0 picks a free one)', integerFlag('--port', 0, 65_535), 8_080)
    .option('--host <host>', 'interface to listen on; anything but localhost requires --token', hostFlag, '127.0.0.1')
    .option('--allowed-host <name>', 'another host name the Host header may carry, e.g. behind a proxy (repeatable)', allowedHostFlag, [])
    .option('--token <token>', 'bearer token every API request must carry')
    .option('--allow-actions', 'enable release and redrive (read-only otherwise)')
    .option('--sessions-table <name>', 'SQLite: the client sessions table (default retrysafe_sessions)', patternFlag('--sessions-table', /^[A-Za-z_][A-Za-z0-9_]{0,39}$/, 'letters, digits and underscores (at most 40)'))
    .option('--sessions-prefix <prefix>', 'Redis: the client sessions key prefix (default retrysafe-sessions)', patternFlag('--sessions-prefix', /^[^{}]+$/, 'a non-empty prefix without "{" or "}"'))
    .addOption(durationOption('--sample-every <duration>', 'how often the trends are sampled from the store, e.g. 5s', '5s'))
    .option('--metrics <url>', "a Prometheus text endpoint to scrape with each sample: the receiver's (OpenTelemetry Prometheus exporter) or the gateway's admin /metrics", metricsFlag)
    .addHelpText('after', '\nExit codes: 0 stopped, 2 usage error, store unreachable or missing, port in use.')
    .action(async (flags: ConsoleFlags) => {
      if (!LOCAL_HOSTS.has(flags.host) && (flags.token === undefined || flags.token === '')) {
        throw new CliFailure(`--host ${flags.host} exposes the console beyond this machine; give --token too`);
      }
      if (flags.sessionsTable !== undefined && flags.store.scheme !== 'sqlite') throw new CliFailure('--sessions-table applies to a sqlite: store only');
      if (flags.sessionsPrefix !== undefined && flags.store.scheme !== 'redis' && flags.store.scheme !== 'rediss') {
        throw new CliFailure('--sessions-prefix applies to a redis: store only');
      }
      const opened = await loadPeer(() => flags.store.open('existing'));
      const extras = await openExtras(opened).catch(async (error: unknown) => {
        await opened.store.close();
        throw error;
      });
      const sessions = await openSessions(opened, flags).catch(async (error: unknown) => {
        await Promise.all([opened.store.close(), extras.close()]);
        throw error;
      });
      const close = (): Promise<unknown> => Promise.all([opened.store.close(), extras.close(), sessions.close()]);
      const { createConsoleServer } = await import('../console/server.js');
      const server = createConsoleServer({
        store: opened.store,
        storeName: redactUrl(flags.store.url),
        allowActions: flags.allowActions === true,
        token: flags.token,
        allowedHosts: [flags.host, ...flags.allowedHost],
        sessions: sessions.sessions,
        trendIntervalMs: flags.sampleEvery,
        metricsUrl: flags.metrics,
        ...extras.options,
      });
      await listen(server, flags.port, flags.host).catch(async (error: unknown) => {
        await close();
        throw new CliFailure(`cannot listen on ${flags.host}:${flags.port}: ${(error as Error).message}`, 2, { cause: error });
      });
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : flags.port;
      const host = openableHost(flags.host);
      const mode = flags.allowActions === true ? 'actions allowed' : 'read-only';
      // The UI reads the token from the page's fragment; the token itself is not printed (logs keep lines).
      const hint = flags.token === undefined ? '' : `; open http://${host}:${port}/#token=<the --token value>`;
      process.stdout.write(`retrysafe: console on http://${host}:${port}/ (${mode})${hint}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await close();
    });
}

/**
 * Commander argument parser for `--host`, whose name the console then answers to.
 *
 * @throws InvalidArgumentError (exit 2) when the value is no host name or IP address
 */
function hostFlag(text: string): string {
  if (allowedHostName(text) === undefined) throw new InvalidArgumentError('--host takes a host name or an IP address.');
  return text;
}

/**
 * Commander argument parser for `--metrics`: an http or https URL.
 *
 * @throws InvalidArgumentError (exit 2) for anything else
 */
function metricsFlag(text: string): string {
  const url = URL.canParse(text) ? new URL(text) : undefined;
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw new InvalidArgumentError('--metrics takes an http:// or https:// URL.');
  return url.href;
}

/**
 * Commander argument parser for `--allowed-host`: collects the names, each checked.
 *
 * @throws InvalidArgumentError (exit 2) when a value is no host name or IP address, or carries a port
 */
function allowedHostFlag(text: string, previous: readonly string[]): readonly string[] {
  if (allowedHostName(text) === undefined) throw new InvalidArgumentError('--allowed-host takes a host name or an IP address, without a port.');
  return [...previous, text];
}

/**
 * Commander argument parser for a name flag that must match `pattern`.
 *
 * @throws InvalidArgumentError (exit 2) saying what `flag` takes when the value does not match
 */
function patternFlag(flag: string, pattern: RegExp, takes: string): (text: string) => string {
  return (text) => {
    if (!pattern.test(text)) throw new InvalidArgumentError(`${flag} takes ${takes}.`);
    return text;
  };
}

/**
 * The host to print in the console's address: the one it listens on, or for the unspecified address
 * (`0.0.0.0`, `::`), which no browser can open, this machine's first external IPv4 address (the console
 * answers at each of its addresses), else 127.0.0.1.
 */
function openableHost(listening: string): string {
  if (listening !== '0.0.0.0' && listening !== '::') return listening.includes(':') ? `[${listening}]` : listening;
  const external = Object.values(networkInterfaces()).flatMap((addresses) => addresses ?? []).find((address) => address.family === 'IPv4' && !address.internal);
  return external?.address ?? '127.0.0.1';
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** The inbox and outbox over the store's own database, when their tables are there. */
async function openExtras(opened: OpenedStore): Promise<{ options: Pick<ConsoleOptions, 'inbox' | 'outbox'>; close: () => Promise<void> }> {
  const none = { options: {}, close: () => Promise.resolve() };
  if (opened.scheme === 'postgres' || opened.scheme === 'postgresql') {
    const { pool, schema } = opened.store;
    const { rows } = await pool.query<{ inbox: string | null; outbox: string | null }>(
      'SELECT to_regclass(format($1, $3::text)) AS inbox, to_regclass(format($2, $3::text)) AS outbox',
      ['%I.inbox_processed', '%I.outbox', schema],
    );
    const [{ createInbox }, { createPostgresInboxStore }, { createOutbox }] = await loadPeer(() =>
      Promise.all([import('../messaging/inbox/inbox.js'), import('../messaging/inbox/postgres.js'), import('../messaging/outbox/outbox.js')]),
    );
    const found = rows[0];
    return {
      options: {
        ...(found?.inbox != null && { inbox: createInbox({ store: createPostgresInboxStore({ pool, schema }) }) }),
        ...(found?.outbox != null && { outbox: { outbox: createOutbox({ schema }), db: pool } }),
      },
      close: () => Promise.resolve(),
    };
  }
  if (opened.scheme === 'sqlite') {
    const table = 'retrysafe_inbox_processed';
    if (opened.database.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) === undefined) return none;
    const [{ createInbox }, { createSqliteInboxStore }] = await Promise.all([import('../messaging/inbox/inbox.js'), import('../messaging/inbox/sqlite.js')]);
    const store = createSqliteInboxStore({ database: opened.database });
    return { options: { inbox: createInbox({ store }) }, close: () => store.close() };
  }
  return none;
}

/**
 * The client sessions over the store's own database: PostgreSQL's `sessions` table (migration 0005), the
 * SQLite file's sessions table when it is there, or the Redis keys under the sessions prefix (on a
 * connection of its own). Nothing is created: a missing table means no sessions view.
 */
async function openSessions(opened: OpenedStore, flags: ConsoleFlags): Promise<{ sessions: ConsoleOptions['sessions']; close: () => Promise<void> }> {
  const none = { sessions: undefined, close: () => Promise.resolve() };
  if (opened.scheme === 'postgres' || opened.scheme === 'postgresql') {
    const { pool, schema } = opened.store;
    const { rows } = await pool.query<{ found: string | null }>('SELECT to_regclass(format($1, $2::text)) AS found', ['%I.sessions', schema]);
    if (rows[0]?.found == null) return none;
    const { createPostgresSessionStore } = await import('../sessions/postgres.js');
    return { sessions: { store: createPostgresSessionStore({ pool, schema }), location: `table ${schema}.sessions` }, close: () => Promise.resolve() };
  }
  if (opened.scheme === 'sqlite') {
    const table = flags.sessionsTable ?? 'retrysafe_sessions';
    const exists = opened.database.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    if (exists.get(table) === undefined || exists.get(`${table}_requests`) === undefined) return none;
    const { createSqliteSessionStore } = await import('../sessions/sqlite.js');
    const store = createSqliteSessionStore({ database: opened.database, table });
    return { sessions: { store, location: `table ${table}` }, close: () => store.close() };
  }
  if (opened.scheme === 'redis' || opened.scheme === 'rediss') {
    const prefix = flags.sessionsPrefix ?? 'retrysafe-sessions';
    const [{ Redis }, { createRedisSessionStore }] = await loadPeer(() => Promise.all([import('ioredis'), import('../sessions/redis.js')]));
    const client = new Redis(flags.store.driverUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    await client.connect().catch((error: unknown) => {
      client.disconnect();
      throw new CliFailure(`cannot reach ${redactUrl(flags.store.url)} for the client sessions: ${(error as Error).message}`, 2, { cause: error });
    });
    return {
      sessions: { store: createRedisSessionStore({ client, prefix }), location: `keys ${prefix}:*` },
      close: async () => {
        await client.quit();
      },
    };
  }
  return none;
}
