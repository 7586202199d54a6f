/**
 * Entry point of the demo's payments server, run as a child process of `retrysafe demo` so the parent can
 * SIGKILL it mid-request and start it again on the same database. Takes one argument, a JSON
 * {@link ServerConfig}; talks to the parent over the Node IPC channel (see `protocol.ts`) and exits when
 * that channel closes, so it never outlives the demo.
 *
 * @module
 */
import { createServer, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import type { Express } from 'express';
import { createReceiver } from '../../index.js';
import { idempotency } from '../../http/express.js';
import { parseStoreUrl, type OpenedStore } from '../../store-url.js';
import { createPaymentsApp, type PaymentsAppOptions } from './app.js';
import type { ChargeReader } from './ledger.js';
import { PostgresChargeLedger } from './postgres-ledger.js';
import type { ServerMetrics } from './server-metrics.js';
import { isParentMessage, type ServerConfig, type ServerMessage } from './protocol.js';
import { SqliteChargeLedger } from './sqlite-ledger.js';

// The parent is gone (or done with us): nothing else will ever talk to this server. Listened for first,
// before the store opens: a parent that dies while this server starts must not leave it running.
process.on('disconnect', () => process.exit(0));
if (process.send !== undefined && !process.connected) process.exit(0);

/** Sends `message` to the parent; resolves once it is written to the IPC channel (at once without a parent). */
const send = (message: ServerMessage): Promise<void> =>
  new Promise((resolve) => {
    if (process.send === undefined) resolve();
    else process.send(message, undefined, undefined, () => resolve());
  });

// The SDK is a development dependency: without it the receiver records through the API's no-op and the
// report shows no metric counts.
const metrics: ServerMetrics | undefined = await import('./server-metrics.js').then(
  (module) => new module.ServerMetrics(),
  () => undefined,
);
const meterProvider = metrics?.meterProvider;

/**
 * Sends the receiver's counts, then `after` (in that order on the channel, so a crash fault follows them);
 * resolves once the counts are written to the channel.
 */
async function sendCounts(after?: ServerMessage): Promise<void> {
  if (metrics !== undefined) {
    try {
      await send({ type: 'metrics', counts: await metrics.snapshot() });
    } catch (error) {
      process.stderr.write(`retrysafe demo: cannot read the metrics: ${error instanceof Error ? error.message : String(error)}\n`);
    }
  }
  if (after) await send(after);
}

/** What every kind of store shares in the app's options. */
type Common = Pick<PaymentsAppOptions<unknown>, 'slowMs' | 'onFault'>;

/** The app and its charges, wired as each kind of store calls for. */
async function wire(opened: OpenedStore, config: ServerConfig, common: Common): Promise<{ app: Express; ledger: ChargeReader }> {
  const { unsafe, leaseMs } = config;
  switch (opened.scheme) {
    case 'sqlite': {
      // The charges share the store's connection, so a charge commits with its idempotency record.
      const ledger = new SqliteChargeLedger(opened.database);
      const guard = unsafe ? undefined : idempotency({ receiver: createReceiver({ store: opened.store, transactional: true, leaseMs, meterProvider }) });
      return { app: createPaymentsApp({ ...common, ledger, idempotency: guard, transactional: !unsafe }), ledger };
    }
    case 'postgres':
    case 'postgresql': {
      // The charges live in the same database and are written through the request's transaction.
      const ledger = await PostgresChargeLedger.open(opened.store.pool, config.runId);
      const guard = unsafe ? undefined : idempotency({ receiver: createReceiver({ store: opened.store, transactional: true, leaseMs, meterProvider }) });
      return { app: createPaymentsApp({ ...common, ledger, idempotency: guard, transactional: !unsafe }), ledger };
    }
    case 'memory':
    case 'redis':
    case 'rediss':
    case 'etcd':
    case 'dynamodb': {
      // A plain store cannot join a business transaction: the charges go to a SQLite file of their own.
      const ledger = new SqliteChargeLedger(new BetterSqlite3(join(config.directory, 'charges.db')), true);
      const guard = unsafe ? undefined : idempotency({ receiver: createReceiver({ store: opened.store, leaseMs, meterProvider }) });
      return { app: createPaymentsApp({ ...common, ledger, idempotency: guard, transactional: false }), ledger };
    }
  }
}

const config = JSON.parse(process.argv[2] ?? '{}') as ServerConfig;
const opened = await parseStoreUrl(config.store).open('create');
const { app, ledger } = await wire(opened, config, {
  slowMs: config.slowMs,
  onFault: (injected) => void sendCounts({ type: 'fault', ...injected }),
});

const server = createServer((req, res) => {
  // An answer leaves only once counts that include it are on the IPC channel: whatever a client was
  // answered, the parent has counted, even from a server SIGKILLed right after.
  const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
  res.end = ((...args: unknown[]) => {
    void sendCounts().then(() => end(...args));
    return res;
  }) as ServerResponse['end'];
  app(req, res);
});
server.once('error', (error: NodeJS.ErrnoException) => {
  void send({ type: 'listen-failed', code: error.code ?? 'UNKNOWN', message: error.message }).then(() => process.exit(1));
});
server.listen(config.port, '127.0.0.1', () => {
  const address = server.address();
  void send({ type: 'ready', port: typeof address === 'object' && address !== null ? address.port : config.port });
});

process.on('message', (message: unknown) => {
  if (!isParentMessage(message)) return;
  if (message.type === 'charges') {
    ledger.list(message.keyPrefix).then(
      (charges) => sendCounts({ type: 'charges', charges }),
      (error: unknown) => {
        process.stderr.write(`retrysafe demo: cannot list the charges: ${error instanceof Error ? error.message : String(error)}\n`);
        process.exit(1);
      },
    );
    return;
  }
  server.close();
  server.closeAllConnections();
  ledger
    .dispose()
    .then(() => opened.store.close())
    .then(
      () => process.disconnect(),
      () => process.exit(1),
    );
});
// The server runs in a process group of its own, out of a terminal's Ctrl-C; a SIGINT sent to it anyway is
// the parent's to handle: it asks for the shutdown, then removes what the run wrote.
process.on('SIGINT', () => undefined);
