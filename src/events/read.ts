/**
 * The options of an event store's `read`, checked.
 *
 * @module
 */
import { requireIntegerIn } from '../core/validate.js';

/** Events a `read` returns when no `limit` is given. */
const DEFAULT_READ_LIMIT = 1_000;

/**
 * `fromVersion` (an integer from 0; default 0) and `limit` (1 to 100 000; default 1 000) of a `read`.
 *
 * @throws TypeError naming the option otherwise
 */
export function readLimits(options: { readonly fromVersion?: number; readonly limit?: number }): { fromVersion: number; limit: number } {
  return {
    fromVersion: requireIntegerIn('fromVersion', options.fromVersion ?? 0, 0, Number.MAX_SAFE_INTEGER),
    limit: requireIntegerIn('limit', options.limit ?? DEFAULT_READ_LIMIT, 1, 100_000),
  };
}
