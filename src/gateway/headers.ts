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

/** Set by the gateway itself from the spooled body; the client's value is not passed on. */
const SET_BY_GATEWAY = new Set(['host', 'content-length']);

/** What the gateway says about the client connection in the forwarded headers. */
interface ClientConnection {
  /** The client's address, as the socket reports it. */
  readonly address: string;
  /** The Host the client asked for. */
  readonly host: string | undefined;
  readonly proto: 'http' | 'https';
}

/** The names a `Connection` header lists, lower case. */
function connectionNames(value: string | string[] | undefined): Set<string> {
  const names = new Set<string>();
  for (const part of (Array.isArray(value) ? value.join(',') : (value ?? '')).split(',')) {
    const name = part.trim().toLowerCase();
    if (name !== '') names.add(name);
  }
  return names;
}

/** A `Forwarded` node: an IPv6 address is quoted and bracketed (RFC 7239 section 6). */
function forwardedNode(address: string): string {
  return address.includes(':') ? `"[${address}]"` : address;
}

/**
 * The headers sent to the upstream: the client's `rawHeaders` (names and repeated values as sent) minus
 * hop-by-hop headers, `Host` and `Content-Length`, with the forwarded headers appended to any the client
 * (or a proxy in front) sent.
 *
 * @param rawHeaders - the request's `rawHeaders`: name, value, name, value, …
 */
export function upstreamHeaders(rawHeaders: readonly string[], client: ClientConnection): string[] {
  const out: string[] = [];
  let connection: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] as string).toLowerCase() === 'connection') connection = [...connection, rawHeaders[i + 1] as string];
  }
  const dropped = connectionNames(connection);
  const forwarded: Record<string, string> = {};
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    const value = rawHeaders[i + 1] as string;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || SET_BY_GATEWAY.has(lower) || dropped.has(lower)) continue;
    if (lower === 'forwarded' || lower === 'x-forwarded-for') {
      forwarded[lower] = forwarded[lower] === undefined ? value : `${forwarded[lower]}, ${value}`;
      continue;
    }
    if (lower === 'x-forwarded-host' || lower === 'x-forwarded-proto') continue;
    out.push(name, value);
  }
  const node = `for=${forwardedNode(client.address)};proto=${client.proto}${client.host === undefined ? '' : `;host=${JSON.stringify(client.host)}`}`;
  out.push('forwarded', forwarded['forwarded'] === undefined ? node : `${forwarded['forwarded']}, ${node}`);
  out.push('x-forwarded-for', forwarded['x-forwarded-for'] === undefined ? client.address : `${forwarded['x-forwarded-for']}, ${client.address}`);
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
    if (value === undefined || HOP_BY_HOP.has(name) || dropped.has(name)) continue;
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
