/**
 * The deprecated first names of an inbox store's redrive and reap ({@link InboxStoreAliases}), answered
 * through the current ones, once for every store retrysafe ships.
 *
 * @module
 */
import type { DeadLetter, InboxStoreAliases } from './store.js';

/** A store that implements `requestRedrive`, `pendingRedrives` and `reap`, and so answers to their old names. */
export abstract class AliasedInboxStore implements InboxStoreAliases {
  abstract requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean>;
  abstract pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]>;
  abstract reap(before: number, limit: number): Promise<number>;

  requestReplay(consumer: string, messageId: string, now: number): Promise<boolean> {
    return this.requestRedrive(consumer, messageId, now);
  }

  pendingReplays(consumer: string, limit: number): Promise<DeadLetter[]> {
    return this.pendingRedrives(consumer, limit);
  }

  cleanup(before: number, limit: number): Promise<number> {
    return this.reap(before, limit);
  }
}
