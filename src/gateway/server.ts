/**
 * The running gateway: its listeners, the store, and the configuration in force. A reload (SIGHUP, or
 * the configuration file changing) reads and validates the file first and swaps the routes, upstreams
 * and scope rule in one assignment, so a request is served wholly by the old configuration or wholly by
 * the new; an invalid file, or one that changes `store` or `listen`/`admin` (which need a restart), is
 * reported and the old configuration stays. Closing drains: the listeners stop accepting, requests in
 * flight finish (up to `drain`), then connections, upstream pools and the store are closed.
 *
 * @module
 */
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { basename, dirname } from 'node:path';
import type { StoredResponse } from '../core/record.js';
import { createReceiver } from '../receiver.js';
import { parseStoreUrl } from '../store-url.js';
import { handleAdmin } from './admin.js';
import { loadConfig, type GatewayConfig, type ListenConfig } from './config.js';
import { HoldingStore } from './indeterminate.js';
import { GatewayMetrics } from './metrics.js';
import { handleRequest, type ProxyContext, type RouteRuntime } from './proxy.js';
import { createScopeResolver } from './scope.js';
import { Upstream } from './upstream.js';

/** Hooks of a running gateway. */
export interface GatewayOptions {
  /** Gets each access-log line (when the configuration's `accessLog` is on). @defaultValue a line on stdout */
  readonly log?: (line: string) => void;
  /** Gets each reload's outcome: `undefined` on success, the error otherwise. @defaultValue a line on stderr */
  readonly onReload?: (error: Error | undefined) => void;
  /** Whether a change of the configuration file reloads it. @defaultValue true */
  readonly watchFile?: boolean;
}

/** A started gateway. */
export interface Gateway {
  /** The proxy listeners' addresses, in the configuration's order (port 0 resolved). */
  readonly addresses: readonly AddressInfo[];
  /** The admin listener's address, if there is one. */
  readonly adminAddress: AddressInfo | undefined;
  /** The configuration in force. */
  config(): GatewayConfig;
  /** Re-reads the configuration file; resolves `true` when the new one is in force. Never rejects. */
  reload(): Promise<boolean>;
  /** Drains and stops (see the module notes). */
  close(): Promise<void>;
}

function persistBelow500(response: StoredResponse): boolean {
  return response.status < 500;
}

/** The routes, upstreams and scope rule of `config` over `store`. */
async function contextOf(config: GatewayConfig, store: HoldingStore, metrics: GatewayMetrics, log: ((line: string) => void) | undefined): Promise<{ context: ProxyContext; upstreams: Upstream[] }> {
  const scope = await createScopeResolver(config.scope);
  const upstreams = config.upstreams.map((options) => new Upstream(options));
  const byName = new Map(upstreams.map((upstream) => [upstream.name, upstream]));
  const routes: RouteRuntime[] = config.routes.map((route) => ({
    config: route,
    upstream: byName.get(route.upstream) as Upstream,
    engine: createReceiver({
      store,
      leaseMs: route.leaseMs,
      retentionMs: route.ttlMs,
      inFlight: route.inFlight,
      waitTimeoutMs: route.waitMs,
      shouldPersist: route.serverErrors === 'keep' ? () => true : persistBelow500,
    }),
  }));
  return { context: { routes, scope, store, metrics, log: config.accessLog ? log : undefined }, upstreams };
}

function listen(server: Server, at: ListenConfig): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      server.removeListener('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

async function serverFor(at: ListenConfig, handler: (request: IncomingMessage, response: ServerResponse) => void): Promise<Server> {
  if (at.tls === undefined) return createHttpServer({ keepAliveTimeout: 5_000 }, handler);
  const [cert, key, ca] = await Promise.all([readFile(at.tls.cert), readFile(at.tls.key), at.tls.ca === undefined ? undefined : readFile(at.tls.ca)]);
  return createHttpsServer({ cert, key, ...(ca !== undefined && { ca, requestCert: true, rejectUnauthorized: true }), keepAliveTimeout: 5_000 }, handler);
}

function sameListeners(a: GatewayConfig, b: GatewayConfig): boolean {
  return JSON.stringify([a.listen, a.admin]) === JSON.stringify([b.listen, b.admin]);
}

/**
 * Opens the store (creating a SQLite file or PostgreSQL schema that is not there yet) and starts the
 * listeners of `config`.
 *
 * @throws `StoreOpenError` when the store cannot be opened; the listen error (e.g. `EADDRINUSE`)
 * @example
 * ```ts
 * const gateway = await startGateway(await loadConfig('gateway.yaml'));
 * process.once('SIGTERM', () => void gateway.close());
 * ```
 */
export async function startGateway(initial: GatewayConfig, options: GatewayOptions = {}): Promise<Gateway> {
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const opened = await parseStoreUrl(initial.store).open('create');
  const store = new HoldingStore(opened.store);
  const metrics = new GatewayMetrics();
  const built = await contextOf(initial, store, metrics, log).catch(async (error: unknown) => {
    await store.close();
    throw error;
  });
  const gateway = new RunningGateway(initial, built, store, metrics, log, options.onReload ?? reportReload);
  try {
    await gateway.listen();
  } catch (error) {
    await gateway.close();
    throw error;
  }
  if (options.watchFile ?? true) gateway.watch();
  return gateway;
}

function reportReload(error: Error | undefined): void {
  process.stderr.write(error === undefined ? 'retrysafe gateway: configuration reloaded\n' : `retrysafe gateway: reload refused, the old configuration stays: ${error.message}\n`);
}

function closed(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A gateway whose listeners serve the configuration in force (`current`), swapped whole on reload. */
class RunningGateway implements Gateway {
  readonly addresses: AddressInfo[] = [];
  adminAddress: AddressInfo | undefined;
  private readonly servers: Server[] = [];
  private adminServer: Server | undefined;
  private watcher: FSWatcher | undefined;
  private accepting = true;
  private inFlight = 0;
  private drained: (() => void) | undefined;
  private reloading: Promise<boolean> = Promise.resolve(true);
  /** Counts a served request out, and ends a drain when it was the last in flight. */
  private readonly served = (): void => {
    this.inFlight -= 1;
    if (this.inFlight === 0) this.drained?.();
  };

  constructor(
    private inForce: GatewayConfig,
    private current: { context: ProxyContext; upstreams: Upstream[] },
    private readonly store: HoldingStore,
    private readonly metrics: GatewayMetrics,
    private readonly log: (line: string) => void,
    private readonly onReload: (error: Error | undefined) => void,
  ) {}

  config(): GatewayConfig {
    return this.inForce;
  }

  /** Starts every listener of the configuration, in order. */
  async listen(): Promise<void> {
    const onRequest = (request: IncomingMessage, response: ServerResponse): void => {
      this.inFlight += 1;
      // handleRequest never rejects: one reaction counts the request out.
      void handleRequest(this.current.context, request, response).then(this.served);
    };
    for (const at of this.inForce.listen) {
      const server = await serverFor(at, onRequest);
      this.servers.push(server);
      this.addresses.push(await listen(server, at));
    }
    if (this.inForce.admin === undefined) return;
    const admin = { store: this.store, metrics: this.metrics, upstreams: () => this.current.upstreams, accepting: () => this.accepting };
    this.adminServer = createHttpServer((request, response) => void handleAdmin(admin, request, response));
    this.adminAddress = await listen(this.adminServer, this.inForce.admin);
  }

  /** Reloads when the configuration file changes. */
  watch(): void {
    let timer: NodeJS.Timeout | undefined;
    const name = basename(this.inForce.file);
    // The directory, not the file: an editor that saves by renaming a new file over the old one leaves a
    // watch on the file looking at the old inode. Saves come in bursts: one reload after the file settles.
    this.watcher = watch(dirname(this.inForce.file), (_, changed) => {
      if (changed !== name) return;
      clearTimeout(timer);
      timer = setTimeout(() => void this.reload(), 100);
    });
    this.watcher.on('error', () => undefined);
  }

  reload(): Promise<boolean> {
    this.reloading = this.reloading.then(() => this.reloadOnce());
    return this.reloading;
  }

  private async reloadOnce(): Promise<boolean> {
    try {
      const next = await loadConfig(this.inForce.file);
      if (next.store !== this.inForce.store) throw new Error('store cannot change on reload; restart the gateway');
      if (!sameListeners(next, this.inForce)) throw new Error('listen and admin cannot change on reload; restart the gateway');
      const built = await contextOf(next, this.store, this.metrics, this.log);
      const old = this.current;
      this.current = built;
      this.inForce = next;
      void Promise.all(old.upstreams.map((upstream) => upstream.close()));
      this.onReload(undefined);
      return true;
    } catch (error) {
      this.onReload(error instanceof Error ? error : new Error(String(error)));
      return false;
    }
  }

  async close(): Promise<void> {
    this.accepting = false;
    this.watcher?.close();
    const stopped = this.servers.map(closed);
    for (const server of this.servers) server.closeIdleConnections();
    if (this.inFlight > 0) {
      const drained = new Promise<void>((resolve) => (this.drained = resolve));
      await Promise.race([drained, new Promise((resolve) => setTimeout(resolve, this.inForce.drainMs).unref())]);
    }
    for (const server of this.servers) server.closeAllConnections();
    await Promise.all(stopped);
    if (this.adminServer !== undefined) {
      this.adminServer.closeAllConnections();
      await closed(this.adminServer);
    }
    await Promise.all(this.current.upstreams.map((upstream) => upstream.close()));
    await this.store.close();
  }
}
