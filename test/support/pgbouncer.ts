/**
 * A PgBouncer in transaction mode in front of the test PostgreSQL, for one test file: its own config in a
 * temp dir, a free port. `stop()` stops the process and keeps the config, `start()` runs it again on the
 * same port (a pooler restart), `close()` stops it for good and removes the dir. PgBouncer refuses to run
 * as root, so as root it drops to the `postgres` user (`-u postgres`). With CI=true a missing `pgbouncer`
 * binary fails the run.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort, POSTGRES_URL, serviceAvailable } from './services.js';

const run = promisify(execFile);

/** A running PgBouncer. */
export interface LocalPgBouncer {
  /** `POSTGRES_URL` with the host and port of the pooler. */
  readonly url: string;
  /** Its version, e.g. `[1, 18, 0]`. */
  readonly version: readonly number[];
  /** Whether it keeps prepared statements across transactions (1.21+ with `max_prepared_statements`). */
  readonly preparedStatements: boolean;
  /** Stops the process at once (SIGTERM: PgBouncer's immediate shutdown), dropping every client; the config stays. */
  stop(): Promise<void>;
  /** Starts the process again with the same config and port; resolves once it answers a query. */
  start(): Promise<void>;
  /** Stops the process and removes its config dir. */
  close(): Promise<void>;
}

/** Settings of the pooler a test may change. */
export interface PgBouncerSettings {
  /** PgBouncer's `max_client_conn`: client connections it accepts before refusing. @defaultValue 500 */
  readonly maxClientConn?: number;
}

/** Starts PgBouncer, or resolves `undefined` when the binary is missing outside CI. */
export async function startPgBouncer(settings: PgBouncerSettings = {}): Promise<LocalPgBouncer | undefined> {
  let versionText = '';
  const found = await serviceAvailable('pgbouncer', async () => {
    versionText = (await run('pgbouncer', ['--version'])).stdout;
  });
  if (!found) return undefined;
  const version = (/PgBouncer (\d+)\.(\d+)\.(\d+)/.exec(versionText) ?? []).slice(1).map(Number);
  const [major = 0, minor = 0] = version;
  const preparedStatements = major > 1 || (major === 1 && minor >= 21);
  const target = new URL(POSTGRES_URL);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-pgbouncer-'));
  await chmod(dir, 0o755);
  const user = decodeURIComponent(target.username || 'postgres');
  await writeFile(join(dir, 'users.txt'), `"${user}" ""\n`, { mode: 0o644 });
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      // Tests need no durability: without a flush per commit the 10,000-request session suites run in seconds.
      `* = host=${target.hostname} port=${target.port || '5432'} connect_query='SET synchronous_commit = off'`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      'pool_mode = transaction',
      `max_client_conn = ${settings.maxClientConn ?? 500}`,
      'default_pool_size = 10',
      'ignore_startup_parameters = extra_float_digits,options',
      ...(preparedStatements ? ['max_prepared_statements = 100'] : []),
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0;
  const url = new URL(POSTGRES_URL);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  let child: ChildProcess | undefined;

  const stop = async (): Promise<void> => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = once(running, 'exit');
    running.kill('SIGTERM');
    await exited;
  };
  const start = async (): Promise<void> => {
    if (child !== undefined) throw new Error('pgbouncer is running already');
    const started = spawn('pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
    child = started;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const probe = new pg.Client({ connectionString: url.href, connectionTimeoutMillis: 1_000 });
      probe.on('error', () => undefined);
      try {
        await probe.connect();
        await probe.query('SELECT 1');
        await probe.end();
        return;
      } catch (error) {
        await probe.end().catch(() => undefined);
        if (Date.now() > deadline || started.exitCode !== null) {
          await stop();
          throw new Error(`pgbouncer did not come up on port ${port}`, { cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const close = async (): Promise<void> => {
    await stop();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await start();
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return { url: url.href, version, preparedStatements, stop, start, close };
}
