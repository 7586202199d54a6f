/**
 * Commander parsers of the flags several commands share: the `--store URL` flag as the `reap`, `inspect`
 * and `complete` commands parse it, integers, durations and `--schema`. A bad value is a usage error
 * (exit 2), reported with what is accepted.
 *
 * @module
 */
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../core/duration.js';
import { schemaNames } from '../stores/postgres/schema.js';
import { parseStoreUrl, StoreUrlError, type StoreTarget } from './store-url.js';

/**
 * Commander argument parser for `--store`.
 *
 * @throws InvalidArgumentError (exit 2) when the value names no known store; see `parseStoreUrl`
 */
export function storeFlag(text: string): StoreTarget {
  try {
    return parseStoreUrl(text);
  } catch (error) {
    if (error instanceof StoreUrlError) throw new InvalidArgumentError(error.message);
    throw error;
  }
}

/**
 * Commander argument parser for an integer flag between `min` and `max` inclusive.
 *
 * @throws InvalidArgumentError (exit 2) naming the flag when the value is not such an integer
 */
export function integerFlag(flag: string, min: number, max: number): (text: string) => number {
  return (text) => {
    const value = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
      throw new InvalidArgumentError(`${flag} must be an integer from ${min} to ${max}.`);
    }
    return value;
  };
}

/**
 * Commander argument parser for a duration flag such as `--retention 7d`: the value in milliseconds.
 *
 * @throws InvalidArgumentError (exit 2) with `parseDuration`'s message, which names the flag
 */
export function durationFlag(flag: string): (text: string) => number {
  return (text) => {
    try {
      return parseDuration(flag, text);
    } catch (error) {
      throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
    }
  };
}

/**
 * Commander argument parser for `--schema`: a PostgreSQL schema name as `schemaNames` accepts it.
 *
 * @throws InvalidArgumentError (exit 2) with `schemaNames`' message when the name is not accepted
 */
export function schemaFlag(text: string): string {
  try {
    return schemaNames('--schema', text).name;
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}
