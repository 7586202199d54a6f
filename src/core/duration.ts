/**
 * Validation of time options. Every duration option in retrysafe is in **milliseconds** and is checked
 * once, in the factory that takes it.
 *
 * @module
 */

/**
 * Returns `value` if it is a positive safe integer number of milliseconds; otherwise throws a
 * `TypeError` naming the option and the value.
 *
 * @param name - the option's name as the user wrote it (e.g. `"leaseMs"`), used in the error message
 * @param value - the candidate value
 * @throws TypeError when `value` is not a positive safe integer
 */
export function requireDurationMs(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw new TypeError(
      `retrysafe: option "${name}" must be a positive integer number of milliseconds, got ${describe(value)}`,
    );
  }
  return value;
}

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses a human duration such as `"500ms"`, `"30s"`, `"15m"`, `"24h"` or `"7d"` (or a bare integer,
 * taken as milliseconds) into milliseconds. Used by the CLI's flags.
 *
 * @throws TypeError when the text is not a positive duration
 */
export function parseDuration(name: string, text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) {
    throw new TypeError(`retrysafe: option "${name}" must be a duration like 500ms, 30s, 15m, 24h or 7d, got ${describe(text)}`);
  }
  return requireDurationMs(name, Number(match[1]) * (UNIT_MS[match[2] ?? 'ms'] ?? 1));
}

/** Renders an option value for an error message. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  try {
    return String(JSON.stringify(value) ?? value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
