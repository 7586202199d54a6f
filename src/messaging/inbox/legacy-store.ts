/**
 * Inbox stores written against the contract's first names ({@link LegacyInboxStore}): `createInbox` calls
 * them through the current names, so a custom store from before the rename keeps working unchanged.
 *
 * @module
 */
import type { DeadLetter, InboxStore, LegacyInboxStore } from './store.js';

const SHARED = ['begin', 'process', 'fail', 'deadLetters', 'close'] as const;
const CURRENT = ['requestRedrive', 'pendingRedrives', 'reap'] as const;
const FIRST = ['requestReplay', 'pendingReplays', 'cleanup'] as const;

/**
 * `store` as an {@link InboxStore}: itself when it has the current methods; when it has only the first
 * names, an adapter that calls `requestReplay`, `pendingReplays` and `cleanup` for `requestRedrive`,
 * `pendingRedrives` and `reap`, and reads its dead letters' `replayRequestedAt` as `redriveRequestedAt`;
 * `undefined` when it is neither.
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
    deadLetters: async (...args) => (await legacy.deadLetters(...args)).map(redriveNamed),
    requestRedrive: (...args) => legacy.requestReplay(...args),
    pendingRedrives: async (...args) => (await legacy.pendingReplays(...args)).map(redriveNamed),
    reap: (...args) => legacy.cleanup(...args),
    close: () => legacy.close(),
  } satisfies InboxStore<Tx>);
}

/** A legacy store's dead letter with its redrive time under the current name too. */
function redriveNamed(letter: Omit<DeadLetter, 'redriveRequestedAt'>): DeadLetter {
  return Object.freeze({ ...letter, redriveRequestedAt: letter.replayRequestedAt });
}
