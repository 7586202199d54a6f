/**
 * The Redis key layout: one string key per record, named `${prefix}:{${scope}\0${key}}` with scope and key
 * escaped, so the whole record identity is the Redis Cluster hash tag.
 *
 * @module
 */

/**
 * Escapes `%`, `{`, `}` and NUL as `%25`, `%7B`, `%7D`, `%00`. The result never holds a `}` (so it cannot
 * close the hash tag early) nor a NUL (so the NUL between scope and key splits them unambiguously), and the
 * escaping is reversible, so distinct (scope, key) pairs always get distinct Redis keys.
 */
function escapePart(text: string): string {
  // Most keys need no escape: one test, rather than two replacements, on every claim.
  if (!/[%{}]/.test(text) && !text.includes('\u0000')) return text;
  return text
    .replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replaceAll('\u0000', '%00');
}

/**
 * The Redis key of the record (scope, key); also the pub/sub channel its changes are published on.
 * Redis Cluster hashes only the text between the first `{` and the next `}` (the hash tag): the prefix holds
 * no brace (checked by the factory) and the escaped parts hold no `}`, so the tag is exactly the record
 * identity, and every script's keys fall in one slot.
 */
export function recordKey(prefix: string, scope: string, key: string): string {
  return `${prefix}:{${escapePart(scope)}\u0000${escapePart(key)}}`;
}

/**
 * The (scope, key) of a record key that {@link recordKey} built under `prefix`, or `undefined` when
 * `redisKey` is no such key (another prefix, a suffixed companion key such as `…}:responses`).
 */
export function parseRecordKey(prefix: string, redisKey: string): [scope: string, key: string] | undefined {
  const head = `${prefix}:{`;
  if (!redisKey.startsWith(head) || !redisKey.endsWith('}')) return undefined;
  const parts = redisKey.slice(head.length, -1).split('\u0000');
  if (parts.length !== 2 || parts.some((part) => part.includes('}'))) return undefined;
  const [scope = '', key = ''] = parts.map(unescapePart);
  return [scope, key];
}

/** Reverses `escapePart`: `%25`, `%7B`, `%7D` and `%00` back to `%`, `{`, `}` and NUL. */
function unescapePart(text: string): string {
  return text.replace(/%(25|7B|7D|00)/g, (_match, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** A SCAN `MATCH` pattern for every record key under `prefix` (glob metacharacters in it escaped). */
export function recordPattern(prefix: string): string {
  return `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}:{*`;
}
