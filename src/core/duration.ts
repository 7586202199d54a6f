/**
 * Human durations for the CLI's flags. Every duration option in retrysafe is in **milliseconds**.
 *
 * @module
 */
import { describe, requireDurationMs } from './validate.js';

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
