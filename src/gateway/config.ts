/**
 * The gateway's configuration: a YAML or JSON file validated against the published JSON Schema
 * (`src/gateway/gateway.schema.json`, shipped in the package) with Ajv, then resolved into
 * {@link GatewayConfig}: durations in milliseconds, sizes in bytes, each route's settings over the
 * `defaults`. Every key is described in docs/gateway.md.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { parseDuration } from '../core/duration.js';
import { ModuleError } from '../core/errors.js';
import type { InFlightPolicy } from '../core/receiver.js';
import { DEFAULT_REPLAY_HEADERS } from '../http/pipeline.js';
import { parseStoreUrl } from '../store-url.js';
import { pathPattern } from './routes.js';
import type { UpstreamOptions } from './upstream.js';

/** The configuration file is unreadable or invalid; the message is one line naming the file and the key. */
export class GatewayConfigError extends ModuleError<'gateway-config-invalid'> {
  override readonly name = 'GatewayConfigError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('gateway-config-invalid', message, options);
  }
}

/** A listener: host, port, and TLS files (with `ca`, client certificates are required: mTLS). */
export interface ListenConfig {
  readonly host: string;
  readonly port: number;
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string | undefined } | undefined;
}

/** Where the scope of a key comes from (see docs/gateway.md, "Scope"). */
export type ScopeConfig =
  | { readonly kind: 'global' }
  | { readonly kind: 'jwt'; readonly jwks: string; readonly claim: string; readonly header: string; readonly issuer: string | undefined; readonly audience: string | undefined }
  | { readonly kind: 'mtls' }
  | { readonly kind: 'api-key'; readonly header: string }
  | { readonly kind: 'trusted-header'; readonly header: string };

/** One route, resolved. Durations in milliseconds, sizes in bytes. */
export interface RouteConfig {
  readonly name: string;
  /** Upper-case methods the route takes. */
  readonly methods: ReadonlySet<string>;
  readonly path: string;
  readonly pattern: RegExp;
  readonly upstream: string;
  readonly key: 'required' | 'optional' | 'off';
  readonly ttlMs: number;
  readonly leaseMs: number;
  readonly timeoutMs: number;
  readonly inFlight: InFlightPolicy;
  readonly waitMs: number;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
  readonly serverErrors: 'release' | 'keep';
  readonly reconcilePath: string | undefined;
  readonly forwardKey: boolean;
  /** The replay allow-list: the default one plus the route's `replayHeaders`, lower case. */
  readonly replayHeaders: ReadonlySet<string>;
}

/** The whole configuration, resolved. */
export interface GatewayConfig {
  /** The file it was read from (absolute). */
  readonly file: string;
  readonly listen: readonly ListenConfig[];
  readonly admin: ListenConfig | undefined;
  /** The store URL, checked against the `--store` grammar. */
  readonly store: string;
  readonly scope: ScopeConfig;
  readonly upstreams: readonly UpstreamOptions[];
  readonly routes: readonly RouteConfig[];
  readonly drainMs: number;
  readonly accessLog: boolean;
}

type Raw = Record<string, unknown>;

const SCHEMA_URL = new URL('../../src/gateway/gateway.schema.json', import.meta.url);
let validator: ReturnType<Ajv['compile']> | undefined;

function validate(document: unknown): readonly ErrorObject[] {
  if (validator === undefined) {
    // The same relative path reaches the schema from src/gateway/ (under tsx) and from dist/gateway/.
    const schema = JSON.parse(readFileSync(SCHEMA_URL, 'utf8')) as object;
    validator = new Ajv({ allErrors: false, strict: false }).compile(schema);
  }
  return validator(document) ? [] : (validator.errors ?? []);
}

/** The most telling schema error in one line: the deepest instance path wins (a `oneOf` reports its branches). */
function describeErrors(errors: readonly ErrorObject[]): string {
  const deepest = [...errors].sort((a, b) => b.instancePath.length - a.instancePath.length)[0];
  if (deepest === undefined) return 'invalid';
  const where = deepest.instancePath === '' ? 'the document' : deepest.instancePath.slice(1).replace(/\//g, '.');
  const extra = deepest.keyword === 'additionalProperties' ? ` (${JSON.stringify((deepest.params as { additionalProperty: string }).additionalProperty)})` : '';
  return `${where} ${deepest.message ?? 'is invalid'}${extra}`;
}

const SIZE_UNITS: Readonly<Record<string, number>> = { B: 1, KB: 1_000, KiB: 1_024, MB: 1_000_000, MiB: 1_048_576, GB: 1_000_000_000, GiB: 1_073_741_824 };

function sizeOf(value: unknown): number {
  if (typeof value === 'number') return value;
  const match = /^(\d+)(\w+)$/.exec(String(value));
  return Number(match?.[1]) * (SIZE_UNITS[match?.[2] ?? 'B'] ?? 1);
}

function durationOf(name: string, value: unknown): number {
  return typeof value === 'number' ? value : parseDuration(name, String(value));
}

function listenerOf(value: unknown, base: string): ListenConfig {
  const entry = typeof value === 'string' ? { address: value } : (value as { address: string; tls?: { cert: string; key: string; ca?: string } });
  const at = entry.address.lastIndexOf(':');
  const host = entry.address.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  const port = Number(entry.address.slice(at + 1));
  if (port > 65_535) throw new GatewayConfigError(`port ${port} of ${JSON.stringify(entry.address)} is over 65535`);
  const tls = entry.tls === undefined ? undefined : { cert: resolve(base, entry.tls.cert), key: resolve(base, entry.tls.key), ca: entry.tls.ca === undefined ? undefined : resolve(base, entry.tls.ca) };
  return { host, port, tls };
}

function scopeOf(value: unknown, base: string): ScopeConfig {
  if (value === 'global') return { kind: 'global' };
  const raw = value as Raw;
  if (raw['jwt'] !== undefined) {
    const jwt = raw['jwt'] as Raw;
    const jwks = String(jwt['jwks']);
    return {
      kind: 'jwt',
      jwks: /^https?:\/\//.test(jwks) ? jwks : resolve(base, jwks),
      claim: (jwt['claim'] as string | undefined) ?? 'sub',
      header: ((jwt['header'] as string | undefined) ?? 'authorization').toLowerCase(),
      issuer: jwt['issuer'] as string | undefined,
      audience: jwt['audience'] as string | undefined,
    };
  }
  if (raw['mtls'] !== undefined) return { kind: 'mtls' };
  if (raw['apiKey'] !== undefined) return { kind: 'api-key', header: String((raw['apiKey'] as Raw)['header']).toLowerCase() };
  return { kind: 'trusted-header', header: String((raw['trustedHeader'] as Raw)['name']).toLowerCase() };
}

function routeOf(raw: Raw, defaults: Raw, index: number, upstreams: ReadonlySet<string>): RouteConfig {
  const setting = (name: string): unknown => raw[name] ?? defaults[name];
  const path = String(raw['path']);
  const methods = ((raw['methods'] as string[] | undefined) ?? ['POST', 'PATCH']).map((method) => method.toUpperCase());
  const name = (raw['name'] as string | undefined) ?? `${methods.join(',')} ${path}`;
  const upstream = String(raw['upstream']);
  if (!upstreams.has(upstream)) throw new GatewayConfigError(`routes.${index} names the upstream ${JSON.stringify(upstream)}, which upstreams does not define`);
  const at = (key: string): string => `routes.${index}.${key}`;
  const ttlMs = durationOf(at('ttl'), setting('ttl') ?? '24h');
  const leaseMs = durationOf(at('lease'), setting('lease') ?? '30s');
  if (leaseMs > ttlMs) throw new GatewayConfigError(`${at('lease')} (${leaseMs} ms) must not exceed ${at('ttl')} (${ttlMs} ms)`);
  const extra = ((setting('replayHeaders') as string[] | undefined) ?? []).map((header) => header.toLowerCase());
  let pattern: RegExp;
  try {
    pattern = pathPattern(path);
  } catch (error) {
    throw new GatewayConfigError(`${at('path')}: ${(error as Error).message.replace(/^retrysafe: /, '')}`);
  }
  return {
    name,
    methods: new Set(methods),
    path,
    pattern,
    upstream,
    key: (setting('key') as RouteConfig['key'] | undefined) ?? 'required',
    ttlMs,
    leaseMs,
    timeoutMs: durationOf(at('timeout'), setting('timeout') ?? '30s'),
    inFlight: (setting('inFlight') as InFlightPolicy | undefined) ?? 'reject',
    waitMs: durationOf(at('wait'), setting('wait') ?? '10s'),
    maxBodyBytes: sizeOf(setting('maxBody') ?? '1MiB'),
    maxResponseBytes: sizeOf(setting('maxResponse') ?? '1MiB'),
    serverErrors: (setting('serverErrors') as RouteConfig['serverErrors'] | undefined) ?? 'release',
    reconcilePath: setting('reconcile') as string | undefined,
    forwardKey: (setting('forwardKey') as boolean | undefined) ?? true,
    replayHeaders: new Set([...DEFAULT_REPLAY_HEADERS, ...extra]),
  };
}

/**
 * Resolves a parsed configuration document read from `file`; relative paths in it are taken from the
 * file's directory.
 *
 * @throws {@link GatewayConfigError} naming the first key that is wrong
 */
export function resolveConfig(document: unknown, file: string): GatewayConfig {
  const errors = validate(document);
  if (errors.length > 0) throw new GatewayConfigError(`${file}: ${describeErrors(errors)}`);
  const raw = document as Raw;
  const base = dirname(file);
  try {
    parseStoreUrl(String(raw['store']));
    const upstreamEntries = Object.entries(raw['upstreams'] as Record<string, Raw>);
    const upstreams: UpstreamOptions[] = upstreamEntries.map(([name, entry]) => ({
      name,
      url: String(entry['url']),
      connections: (entry['connections'] as number | undefined) ?? 64,
      connectTimeoutMs: durationOf(`upstreams.${name}.connectTimeout`, entry['connectTimeout'] ?? '2s'),
      keepAliveMs: durationOf(`upstreams.${name}.keepAlive`, entry['keepAlive'] ?? '4s'),
      probePath: entry['probe'] as string | undefined,
    }));
    const names = new Set(upstreams.map((upstream) => upstream.name));
    const defaults = (raw['defaults'] as Raw | undefined) ?? {};
    const listen = Array.isArray(raw['listen']) ? (raw['listen'] as unknown[]) : [raw['listen']];
    const scope = scopeOf(raw['scope'], base);
    const listeners = listen.map((entry) => listenerOf(entry, base));
    if (scope.kind === 'mtls' && listeners.some((listener) => listener.tls?.ca === undefined)) {
      throw new GatewayConfigError('scope mtls needs every listener to have tls with a ca (client certificates are verified against it)');
    }
    return {
      file,
      listen: listeners,
      admin: raw['admin'] === undefined ? undefined : listenerOf(raw['admin'], base),
      store: String(raw['store']),
      scope,
      upstreams,
      routes: (raw['routes'] as Raw[]).map((route, index) => routeOf(route, defaults, index, names)),
      drainMs: durationOf('drain', raw['drain'] ?? '10s'),
      accessLog: (raw['accessLog'] as boolean | undefined) ?? true,
    };
  } catch (error) {
    if (error instanceof GatewayConfigError) throw new GatewayConfigError(`${file}: ${error.message}`, { cause: error });
    throw new GatewayConfigError(`${file}: ${error instanceof Error ? error.message.replace(/^retrysafe: /, '') : String(error)}`, { cause: error });
  }
}

/**
 * Reads, parses (YAML, of which JSON is a subset) and resolves the configuration file at `path`.
 *
 * @throws {@link GatewayConfigError} when the file is unreadable, not YAML/JSON, or invalid
 * @example
 * ```ts
 * const config = await loadConfig('gateway.yaml');
 * ```
 */
export async function loadConfig(path: string): Promise<GatewayConfig> {
  const file = resolve(path);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new GatewayConfigError(`cannot read ${file}: ${(error as Error).message}`, { cause: error });
  }
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new GatewayConfigError(`${file} is not YAML or JSON: ${(error as Error).message.split('\n')[0] ?? ''}`, { cause: error });
  }
  return resolveConfig(document, file);
}
