/**
 * Waiting for a connection that is still being set up, so the first requests after a process starts are
 * served instead of failing fast (a client with `enableOfflineQueue: false` rejects every command until
 * its connection is ready).
 *
 * @module
 */
import type { RedisConnection } from './connection.js';

/** Statuses of a connection on its way to `ready`; `reconnecting` (Redis down) is not one: it fails fast. */
const SETTING_UP: ReadonlySet<string> = new Set(['connecting', 'connect']);

/**
 * The wait in progress per connection, shared by every operation that asks for it with the same bound: a
 * burst of first requests adds one set of listeners to the connection, not one per request (beyond ten,
 * Node warns of a possible listener leak).
 */
const waits = new WeakMap<RedisConnection, { readonly timeoutMs: number; readonly wait: Promise<void> }>();

/**
 * `undefined` when `client` is not setting up a connection (ready, down, closed) or `timeoutMs` is 0: there
 * is nothing to wait for, and the caller goes on without a promise hop (every operation asks). Otherwise a
 * promise that resolves once `client` is ready, or `timeoutMs` milliseconds after the first caller asked,
 * or when the attempt fails; the command that follows then fails (or succeeds) as it would have. Callers
 * that ask with the same `timeoutMs` while one wait is in progress share it.
 */
export function untilReady(client: RedisConnection, timeoutMs: number): Promise<void> | undefined {
  if (timeoutMs <= 0 || !SETTING_UP.has(client.status)) return undefined;
  const shared = waits.get(client);
  if (shared?.timeoutMs === timeoutMs) return shared.wait;
  const wait = new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      client.off('ready', done).off('error', done).off('close', done).off('end', done);
      if (waits.get(client)?.wait === wait) waits.delete(client);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    client.once('ready', done).once('error', done).once('close', done).once('end', done);
  });
  waits.set(client, { timeoutMs, wait });
  return wait;
}
