/**
 * Commander parsers of the flags several commands share: the `--store URL` flag as the `reap`, `inspect`
 * and `complete` commands parse it, integers, durations and `--schema`. A bad value is a usage error
 * (exit 2), reported with what is accepted.
 *
 * @module
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { parseDuration } from '../core/duration.js';
import { schemaNames } from '../stores/postgres/schema.js';
import { parseStoreUrl, StoreUrlError, type StoreTarget } from '../store-url.js';
import { CliFailure } from './failure.js';

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
 * A duration option such as `--lease <duration>`, parsed by {@link durationFlag} into milliseconds; its
 * default is written as the user would type it (`30s`, `24h`), so `--help` shows the unit the flag takes.
 *
 * @param flags - commander's flags text, e.g. `'--lease <duration>'`
 * @param fallback - the default as a duration text, e.g. `'30s'`; omitted for a flag without default
 */
export function durationOption(flags: string, description: string, fallback?: string): Option {
  const name = flags.split(' ', 1)[0] ?? flags;
  const option = new Option(flags, description).argParser(durationFlag(name));
  return fallback === undefined ? option : option.default(parseDuration(name, fallback), fallback);
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

/**
 * Commander argument parser for a `--store` that must name PostgreSQL (`migrate`, `outbox`).
 *
 * @param why - what the command does on PostgreSQL, for the message
 * @throws InvalidArgumentError (exit 2) for a bad `--store` or one naming another store
 */
export function postgresStoreFlag(why: string): (text: string) => StoreTarget {
  return (text) => {
    const target = storeFlag(text);
    if (target.scheme !== 'postgres' && target.scheme !== 'postgresql') {
      throw new InvalidArgumentError(`--store must be a postgres:// or postgresql:// URL; ${why}, got ${JSON.stringify(text)}.`);
    }
    return target;
  };
}

/**
 * The PostgreSQL schema a command works in: the `--store` URL's `?schema=`, else `--schema` (whose default
 * is `retrysafe`).
 *
 * @throws {@link CliFailure} (exit 2) when both are given and differ
 */
export function schemaOf(target: StoreTarget, command: Command): string {
  const flag = command.getOptionValue('schema') as string;
  const named = target.schema;
  if (named === undefined) return flag;
  if (command.getOptionValueSource('schema') === 'cli' && named !== flag) {
    throw new CliFailure(`--schema ${flag} differs from the --store URL's ?schema=${named}; give one of them`);
  }
  return named;
}
