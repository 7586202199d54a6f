/**
 * The console's defence against DNS rebinding and cross-site requests: which `Host` header values it
 * answers, and which `Origin` may send it an action.
 *
 * DNS rebinding: a page from `http://evil.example:8080` whose name the attacker re-points at 127.0.0.1 may
 * send requests to a console listening there and read the answers, since to the browser they are
 * same-origin. The `Host` header still names `evil.example`, so a console that answers only the names it
 * is reached by (RFC 9110 section 7.2) refuses them — with 421 Misdirected Request (RFC 9110 section
 * 15.5.20). A cross-site form or `fetch` cannot name the console's own host in `Origin` (RFC 6454 section 7),
 * so an action whose `Origin` names another host is refused with 403.
 *
 * @module
 */
import type { IncomingMessage } from 'node:http';

/** The names a console answers on whatever its address: the loopback names. */
export const LOOPBACK_HOSTS: readonly string[] = Object.freeze(['localhost', '127.0.0.1', '[::1]']);

// A host name or IPv4 address, or a bracketed IPv6 address, then an optional port: no user info, path or
// spaces, which `new URL` would otherwise read as something else.
const HOST_HEADER = /^(?:\[[0-9A-Fa-f:.]+\]|[^\s/?#@[\]:\\]+)(?::\d{1,5})?$/;

/**
 * The host name of a `Host` header value (`name`, `name:port`, `[v6]:port`), in canonical form: lower
 * case, IPv4 and IPv6 addresses normalised as the WHATWG URL parser does them (IPv6 in brackets), and a
 * trailing dot dropped. `undefined` when the value is no valid host.
 *
 * @example `canonicalHost('LocalHost.:8080')` is `'localhost'`; `canonicalHost('[0:0::1]')` is `'[::1]'`.
 */
function canonicalHost(value: string): string | undefined {
  if (!HOST_HEADER.test(value)) return undefined;
  try {
    const name = new URL(`http://${value}`).hostname;
    return name.endsWith('.') ? name.slice(0, -1) : name;
  } catch {
    return undefined;
  }
}

/**
 * The canonical host of a name an operator allows (`--allowed-host`, `--host`): a host name, an IPv4
 * address, or an IPv6 address with or without brackets, without a port. `undefined` when it is none.
 */
export function allowedHostName(name: string): string | undefined {
  const bracketed = name.includes(':') && !name.startsWith('[') ? `[${name}]` : name;
  // `[v6]:port`: a port would be dropped silently, so refuse it (`name:port` already fails as an address).
  if (!bracketed.startsWith('[') || bracketed.endsWith(']')) return canonicalHost(bracketed);
  return undefined;
}

/**
 * Whether `request`'s `Host` names the console: one of `allowed` (canonical names, as
 * {@link allowedHostName} gives them), or the IP address the connection arrived on — an address cannot be
 * rebound, so a console bound to 0.0.0.0 answers at each of the machine's addresses. Only the name is
 * compared, not the port: a rebinding page's port is the console's own.
 */
export function hostAllowed(allowed: ReadonlySet<string>, request: IncomingMessage): boolean {
  const name = canonicalHost(request.headers.host ?? '');
  if (name === undefined) return false;
  if (allowed.has(name)) return true;
  const local = request.socket.localAddress;
  if (local === undefined) return false;
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(local)?.[1];
  return name === allowedHostName(v4 ?? local);
}

/**
 * Whether a state-changing request may act: it has no `Origin` (a script or `curl`, not a browser page),
 * or its `Origin` is an `http:` or `https:` origin whose host and port are those of the `Host` header
 * (same-origin; `https:` for a console behind a TLS-terminating proxy that keeps `Host`). `Origin: null`
 * (a sandboxed frame, a `file:` page) is refused.
 */
export function originAllowed(request: IncomingMessage): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return true;
  try {
    const from = new URL(origin);
    const to = new URL(`${from.protocol}//${request.headers.host ?? ''}`);
    return (from.protocol === 'http:' || from.protocol === 'https:') && from.host === to.host;
  } catch {
    return false;
  }
}
