/**
 * Waiting for a connection that is still being set up, so the first requests after a process starts are
 * served instead of failing fast (a client with `enableOfflineQueue: false` rejects every command until
 * its connection is ready).
 *
 * @module
 */
import type { ConnectionEvents, RedisTransport } from './transport.js';

/** The events that end a connection attempt, one way or the other. */
const EVENTS = ['ready', 'error', 'close', 'end'] as const;

/**
 * The wait in progress per connection, shared by every operation that asks for it with the same bound: a
 * burst of first requests adds one set of listeners to the connection, not one per request (beyond ten,
 * Node warns of a possible listener leak).
 */
const waits = new WeakMap<ConnectionEvents, { readonly timeoutMs: number; readonly wait: Promise<void> }>();

/**
 * `undefined` when `transport` is not setting up a connection (ready, down, closed) or `timeoutMs` is 0: there
 * is nothing to wait for, and the caller goes on without a promise hop (every operation asks). Otherwise a
 * promise that resolves once the connection is ready, or `timeoutMs` milliseconds after the first caller asked,
 * or when the attempt fails; the command that follows then fails (or succeeds) as it would have. Callers
 * that ask with the same `timeoutMs` while one wait is in progress share it.
 */
export function untilReady(transport: RedisTransport, timeoutMs: number): Promise<void> | undefined {
  if (timeoutMs <= 0 || !transport.settingUp()) return undefined;
  const client = transport.events;
  const shared = waits.get(client);
  if (shared?.timeoutMs === timeoutMs) return shared.wait;
  const wait = new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      for (const event of EVENTS) client.off(event, done);
      if (waits.get(client)?.wait === wait) waits.delete(client);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    for (const event of EVENTS) client.once(event, done);
  });
  waits.set(client, { timeoutMs, wait });
  return wait;
}
