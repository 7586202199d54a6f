/**
 * Request fingerprints: a SHA-256 over what makes two requests "the same" for an idempotency key — the
 * method, the route, the canonical query and the body bytes. A retry with the same key and a different
 * fingerprint is refused with 422 (IETF Idempotency-Key draft, section 2.7; Stripe compares the request
 * parameters the same way).
 *
 * @module
 */
// Hot path: docs/hot-path.md#fastify-memory-path (the global `Buffer` is an accessor, which optimised code reads at each use)
import { Buffer } from 'node:buffer';
import { hash } from 'node:crypto';

/** What a fingerprint covers. */
export interface FingerprintInput {
  /** HTTP method, compared case-insensitively (upper-cased). */
  readonly method: string;
  /** The route, e.g. `/payments` or a route pattern such as `/accounts/:id/payments`. */
  readonly route: string;
  /** The raw query string without the leading `?` (order and repeated names are canonicalised). */
  readonly query?: string;
  /** The body bytes (or text, hashed as UTF-8). */
  readonly body?: Uint8Array | string;
}

/**
 * Sorts a query string's pairs by name, then value, decoding and re-encoding each so that
 * `b=2&a=1` and `a=1&b=2` (or `a=%41` and `a=A`) canonicalise alike.
 */
export function canonicalQuery(query: string): string {
  const q = query.startsWith('?') ? query.slice(1) : query;
  if (q === '') return '';
  const pairs = [...new URLSearchParams(q)];
  pairs.sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return new URLSearchParams(pairs).toString();
}

// Hot path: docs/hot-path.md#fastify-memory-path
/**
 * `method` in upper case: as it is when it has no lower-case or non-ASCII character (a method as Node
 * parsed it), so the usual one costs no call into V8's runtime, which `toUpperCase` always makes.
 */
function upperCased(method: string): string {
  for (let i = 0; i < method.length; i++) {
    const code = method.charCodeAt(i);
    if ((code >= 97 && code <= 122) || code > 127) return method.toUpperCase();
  }
  return method;
}

/**
 * Computes a request's fingerprint.
 *
 * @returns 64 lower-case hex characters (SHA-256)
 */
export function fingerprint(input: FingerprintInput): string {
  // Lengths prefix each field so that no two different inputs concatenate alike. The prefixes and the
  // short fields go into one string, hashed in one call with the body (the same bytes as one update each).
  const method = upperCased(input.method);
  const route = input.route;
  const query = input.query ? canonicalQuery(input.query) : '';
  const body = input.body ?? '';
  const head =
    `${Buffer.byteLength(method)}:${method}${Buffer.byteLength(route)}:${route}${Buffer.byteLength(query)}:${query}` +
    `${typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength}:`;
  if (typeof body === 'string') return hash('sha256', head + body);
  const headLength = Buffer.byteLength(head);
  const bytes = Buffer.allocUnsafe(headLength + body.byteLength);
  bytes.write(head, 0);
  bytes.set(body, headLength);
  return hash('sha256', bytes);
}
