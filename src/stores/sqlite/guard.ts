/**
 * A revocable handle on the SQLite connection, for a transactional handler whose transaction may end
 * before the handler does (its lease ran out). The store has one connection: once the transaction is
 * rolled back and the connection serves other requests, a late statement through the raw handle would run
 * in autocommit mode (a business write committed without its record) or inside another request's
 * transaction. Through this handle it throws instead.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { StoreMisuseError } from '../../core/errors.js';

/** The guarded connection and the switch that turns it off. */
interface GuardedDatabase {
  /** Behaves as the connection until {@link GuardedDatabase.revoke}; so do the statements and transaction functions it hands out. */
  readonly database: Database;
  /** From now on every use of the handle, and of what it handed out, throws a `StoreMisuseError`. */
  revoke(): void;
}

/**
 * Wraps `database`. Methods run on the real connection (better-sqlite3's native methods need it as
 * `this`); what they return is wrapped too when it can run SQL later: prepared statements (and the
 * statement itself, which `pluck()`, `raw()`, `bind()`… return) and the functions `transaction()` makes.
 */
export function guardDatabase(database: Database): GuardedDatabase {
  let revoked = false;
  const proxies = new WeakMap<object, object>();
  const check = (): void => {
    if (revoked) {
      throw new StoreMisuseError("retrysafe: the request's SQLite transaction has ended (its lease ran out); this handle can no longer be used");
    }
  };
  const wrap = (value: unknown): unknown => {
    if (value === database) return guarded;
    if (typeof value === 'function' || (typeof value === 'object' && value !== null && runsSql(value))) return guard(value);
    return value;
  };
  const guard = (target: object): object => {
    const known = proxies.get(target);
    if (known) return known;
    const made = typeof target === 'function' ? guardFunction(target as (...args: unknown[]) => unknown) : guardObject(target);
    proxies.set(target, made);
    return made;
  };
  // A function `transaction()` made: a Proxy could not wrap its variants (`immediate`, …: read-only,
  // non-configurable properties a Proxy must return unchanged), so it is copied as a checked function.
  const guardFunction = (fn: (...args: unknown[]) => unknown): object => {
    const checked = (...args: unknown[]): unknown => {
      check();
      return wrap(fn(...args));
    };
    // Cached before its variants are wrapped: each variant refers to the others.
    proxies.set(fn, checked);
    for (const name of Object.getOwnPropertyNames(fn)) {
      const variant: unknown = Reflect.get(fn, name);
      if (typeof variant === 'function') Object.defineProperty(checked, name, { value: guard(variant) });
    }
    return checked;
  };
  const guardObject = (target: object): object =>
    new Proxy(target, {
      get(object, property) {
        check();
        const value: unknown = Reflect.get(object, property, object);
        if (typeof value !== 'function') return wrap(value);
        return function guardedMethod(...args: unknown[]): unknown {
          check();
          return wrap(Reflect.apply(value as (...a: unknown[]) => unknown, object, args));
        };
      },
    });
  const guarded = guard(database) as Database;
  return {
    database: guarded,
    revoke() {
      revoked = true;
    },
  };
}

/** A better-sqlite3 prepared statement. */
function runsSql(value: object): boolean {
  return 'run' in value && 'all' in value && 'reader' in value;
}
