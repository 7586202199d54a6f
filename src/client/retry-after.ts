/**
 * Parsing of the `Retry-After` response header (RFC 9110 section 10.2.3): either delta-seconds or an
 * HTTP-date.
 *
 * @module
 */

/**
 * Turns a `Retry-After` value into a wait in milliseconds.
 *
 * @param value - the header value, e.g. `"120"` (delta-seconds) or `"Wed, 21 Oct 2015 07:28:00 GMT"`
 *   (an HTTP-date, RFC 9110 section 5.6.7); `null` when the header is absent
 * @param now - the current time in milliseconds since the epoch, to measure an HTTP-date against
 * @returns the wait in milliseconds (0 for a date in the past), or `undefined` when the header is absent
 *   or is neither form
 */
export function parseRetryAfter(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1_000;
  // Date.parse also accepts loose forms such as "2024"; an HTTP-date always names the weekday and zone.
  if (!/^[A-Za-z]{3},? /.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
