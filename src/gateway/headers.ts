/**
 * Header handling of the proxy: hop-by-hop headers removed in both directions (RFC 9110 section 7.6.1,
 * plus every name the `Connection` header lists), `Forwarded` (RFC 7239) and `X-Forwarded-For`,
 * `-Host`, `-Proto` appended on the way to the upstream, and the replay allow-list on the way to the store.
 *
 * @module
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Headers that describe one connection, never forwarded by a proxy. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * What {@link upstreamHeaders} does with a request header, by its lower-case name (a name not listed is
 * passed on): `drop` a hop-by-hop header, or one the gateway sets itself (`host`, and `content-length`
 * from the spooled body); `connection`: dropped, and the names it lists dropped too; `forwarded` and
 * `forwarded-for`: the gateway's node or the client's address appended to the client's value;
 * `replaced`: `X-Forwarded-Host` and `-Proto`, set by the gateway; `key`: `Idempotency-Key`, passed on
 * when the route forwards it.
 */
type Handling = 'drop' | 'connection' | 'forwarded' | 'forwarded-for' | 'replaced' | 'key';

const REQUEST_HANDLING: ReadonlyMap<string, Handling> = new Map<string, Handling>([
  ...[...HOP_BY_HOP].map((name): [string, Handling] => [name, 'drop']),
  ['connection', 'connection'],
  ['host', 'drop'],
  ['content-length', 'drop'],
  ['forwarded', 'forwarded'],
  ['x-forwarded-for', 'forwarded-for'],
  ['x-forwarded-host', 'replaced'],
  ['x-forwarded-proto', 'replaced'],
  ['idempotency-key', 'key'],
]);

/** What the gateway says about the client connection in the forwarded headers. */
interface ClientConnection {
  /** The client's address, as the socket reports it. */
  readonly address: string;
  /** The Host the client asked for. */
  readonly host: string | undefined;
  readonly proto: 'http' | 'https';
}

/**
 * The names a `Connection` header lists, lower case, other than the hop-by-hop ones (dropped anyway);
 * `undefined` when it lists no other (`keep-alive`), as it usually does.
 */
function connectionNames(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  let names: Set<string> | undefined;
  for (const part of (Array.isArray(value) ? value.join(',') : value).split(',')) {
    const name = part.trim().toLowerCase();
    if (name !== '' && !HOP_BY_HOP.has(name)) (names ??= new Set()).add(name);
  }
  return names;
}

/** A `Forwarded` node: an IPv6 address is quoted and bracketed (RFC 7239 section 6). */
function forwardedNode(address: string): string {
  return address.includes(':') ? `"[${address}]"` : address;
}

/** `headers` (a flat name/value list) without those whose lower-case name is in `names`. */
function without(headers: readonly string[], names: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    if (!names.has((headers[i] as string).toLowerCase())) out.push(headers[i] as string, headers[i + 1] as string);
  }
  return out;
}

// Hot path: docs/hot-path.md#gateway-request
/**
 * The headers sent to the upstream: the client's `rawHeaders` (names and repeated values as sent) minus
 * hop-by-hop headers, `Host` and `Content-Length` (and `Idempotency-Key` unless `keepKey`), with the
 * forwarded headers appended to any the client (or a proxy in front) sent. One pass over the headers,
 * one lookup per name; only a `Connection` header that lists other names costs a second pass.
 *
 * @param rawHeaders - the request's `rawHeaders`: name, value, name, value, …
 * @param keepKey - whether `Idempotency-Key` is passed on (the route's `forwardKey`) @defaultValue true
 */
export function upstreamHeaders(rawHeaders: readonly string[], client: ClientConnection, keepKey = true): string[] {
  let out: string[] = [];
  let connection: string | undefined;
  let forwarded: string | undefined;
  let forwardedFor: string | undefined;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    const value = rawHeaders[i + 1] as string;
    const handling = REQUEST_HANDLING.get(name.toLowerCase());
    if (handling === undefined || (handling === 'key' && keepKey)) out.push(name, value);
    else if (handling === 'connection') connection = connection === undefined ? value : `${connection},${value}`;
    else if (handling === 'forwarded') forwarded = forwarded === undefined ? value : `${forwarded}, ${value}`;
    else if (handling === 'forwarded-for') forwardedFor = forwardedFor === undefined ? value : `${forwardedFor}, ${value}`;
  }
  const listed = connectionNames(connection);
  if (listed !== undefined) {
    out = without(out, listed);
    // A Connection header naming Forwarded or X-Forwarded-For drops the client's value of it.
    if (listed.has('forwarded')) forwarded = undefined;
    if (listed.has('x-forwarded-for')) forwardedFor = undefined;
  }
  const node = `for=${forwardedNode(client.address)};proto=${client.proto}${client.host === undefined ? '' : `;host=${JSON.stringify(client.host)}`}`;
  out.push('forwarded', forwarded === undefined ? node : `${forwarded}, ${node}`);
  out.push('x-forwarded-for', forwardedFor === undefined ? client.address : `${forwardedFor}, ${client.address}`);
  if (client.host !== undefined) out.push('x-forwarded-host', client.host);
  out.push('x-forwarded-proto', client.proto);
  return out;
}

/** The upstream's response headers for the client: everything but hop-by-hop headers, repeated values kept. */
export function clientHeaders(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const dropped = connectionNames(headers['connection']);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || dropped?.has(name) === true) continue;
    out[name] = value;
  }
  return out;
}

/**
 * The headers saved for replay: only those on the allow-list (lower case), several values joined with
 * `, `; `set-cookie` never, whatever the list says (a replay must not hand one client's session to another).
 */
export function replayedHeaders(headers: Readonly<Record<string, string | string[]>>, allowed: ReadonlySet<string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || name === 'set-cookie' || !allowed.has(name)) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}
