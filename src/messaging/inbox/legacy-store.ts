/**
 * Inbox stores written against the contract's first names ({@link LegacyInboxStore}): `createInbox` calls
 * them through the current names, so a custom store from before the rename keeps working unchanged.
 *
 * @module
 */
import type { InboxStore, LegacyInboxStore } from './store.js';

const SHARED = ['begin', 'process', 'fail', 'deadLetters', 'close'] as const;
const CURRENT = ['requestRedrive', 'pendingRedrives', 'reap'] as const;
const FIRST = ['requestReplay', 'pendingReplays', 'cleanup'] as const;

/**
 * `store` as an {@link InboxStore}: itself when it has the current methods; when it has only the first
 * names, an adapter that calls `requestReplay`, `pendingReplays` and `cleanup` for `requestRedrive`,
 * `pendingRedrives` and `reap`; `undefined` when it is neither.
 */
export function asInboxStore<Tx>(store: unknown): InboxStore<Tx> | undefined {
  if (typeof store !== 'object' || store === null) return undefined;
  const has = (names: readonly string[]): boolean => names.every((name) => typeof (store as Record<string, unknown>)[name] === 'function');
  if (!has(SHARED)) return undefined;
  if (has(CURRENT)) return store as InboxStore<Tx>;
  if (!has(FIRST)) return undefined;
  const legacy = store as LegacyInboxStore<Tx>;
  return Object.freeze({
    begin: (...args) => legacy.begin(...args),
    process: (...args) => legacy.process(...args),
    fail: (...args) => legacy.fail(...args),
    deadLetters: (...args) => legacy.deadLetters(...args),
    requestRedrive: (...args) => legacy.requestReplay(...args),
    pendingRedrives: (...args) => legacy.pendingReplays(...args),
    reap: (...args) => legacy.cleanup(...args),
    close: () => legacy.close(),
  } satisfies InboxStore<Tx>);
}
