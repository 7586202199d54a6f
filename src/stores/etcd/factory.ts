/**
 * The factory of the etcd store: options, their validation, and the frozen configuration.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { systemClock, type Clock } from '../../core/clock.js';
import type { ResponseBodyStore } from '../../core/response-bodies.js';
import type { IdempotencyStore } from '../../core/store.js';
import { describe, invalidOption, requireClock, requireGenerateId, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import { EtcdStore } from './etcd-store.js';

/** Options of {@link createEtcdStore}. */
export interface EtcdStoreOptions {
  /**
   * The `etcd3` client the store runs its transactions on, given every member's client URL so it moves to
   * another member when one fails. Caller-owned: `close()` leaves it open.
   */
  readonly client: Etcd3;
  /** Namespace of every key the store writes: records live at `${prefix}/r/…`. @defaultValue 'retrysafe' */
  readonly prefix?: string;
  /**
   * Where "now" comes from, in milliseconds since the epoch: lease and retention decisions are made by it.
   * An etcd transaction cannot read a server clock, so processes sharing the store decide by their own
   * clocks, and a process whose clock runs ahead by more than the lease takes over live leases; the fencing
   * token still refuses the displaced holder's writes. @defaultValue the system clock
   */
  readonly clock?: Clock;
  /** Lease-token generator. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /**
   * Longest response body kept in etcd, in bytes (0 to 1_048_576). A longer one goes to `responseStore`;
   * without one it is saved without its body, and a replay of it is answered 410
   * `idempotency-response-not-kept` rather than running the work again: etcd refuses a request over its
   * `--max-request-bytes` (1.5 MiB by default), and every record write is one consensus round through the
   * leader's log. @defaultValue 1_048_576 (1 MiB)
   */
  readonly maxResponseBytes?: number;
  /**
   * Where bodies over `maxResponseBytes` are kept: `createPostgresResponseBodies` (`retrysafe/postgres`),
   * `createSqliteResponseBodies` (`retrysafe/sqlite`), or any {@link ResponseBodyStore}. The record and
   * its lease stay in etcd, its head holding the body's length and SHA-256; the body is put under (scope,
   * key, fencing token) before the completion's etcd transaction, read back (and checked) on a replay, and
   * deleted on release and reap. Caller-owned: `close()` leaves it open. See docs/etcd.md.
   * @defaultValue none: such a body is not kept (410 on replay)
   */
  readonly responseStore?: ResponseBodyStore;
}

const MAX_RESPONSE_BYTES = 1_048_576;

/**
 * Creates an {@link IdempotencyStore} on etcd v3. A claim of a new key is one transaction (put the record if
 * its key was never created, `create_revision == 0`, else read it); a takeover, a completion, a release, a
 * checkpoint and a lease renewal are one transaction conditioned on the key's `mod_revision` as read, so of
 * concurrent writers exactly one wins. The fencing token of a claim is the etcd revision of its write
 * (cluster-wide monotonic; the key's `create_revision` for a new key): {@link EtcdStore.fencingToken}, and
 * `fencingToken` on the claims it hands out. Records carry etcd leases shared per minute of deadline, so etcd
 * drops a record by itself a grace after its retention ends; `reap` deletes expired ones sooner. See
 * docs/etcd.md for when etcd is the right store.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { Etcd3 } from 'etcd3';
 * import { createReceiver } from 'retrysafe';
 * import { createEtcdStore } from 'retrysafe/etcd';
 *
 * const client = new Etcd3({ hosts: ['http://10.0.0.1:2379', 'http://10.0.0.2:2379', 'http://10.0.0.3:2379'] });
 * const receiver = createReceiver({ store: createEtcdStore({ client, prefix: 'payments' }) });
 * ```
 */
export function createEtcdStore(
  options: EtcdStoreOptions,
): EtcdStore & Pick<Required<IdempotencyStore>, 'kind' | 'waitFor' | 'checkpoint' | 'listAbandoned' | 'ping' | 'countExpiredLeases' | 'listRecords'> {
  requireOptions('createEtcdStore', options);
  if (!isEtcdClient(options.client)) {
    throw new TypeError(`retrysafe: option "client" must be an etcd3 Etcd3 client, got ${describe(options.client)}`);
  }
  return new EtcdStore(
    Object.freeze({
      client: options.client,
      prefix: requireNonEmptyString('prefix', options.prefix ?? 'retrysafe'),
      clock: options.clock === undefined ? systemClock : requireClock(options.clock),
      generateId: requireGenerateId(options.generateId ?? randomUUID),
      maxResponseBytes: requireIntegerIn('maxResponseBytes', options.maxResponseBytes ?? MAX_RESPONSE_BYTES, 0, MAX_RESPONSE_BYTES),
      responseStore: requireResponseStore(options.responseStore),
    }),
  );
}

/**
 * The `responseStore` option, when given.
 *
 * @throws TypeError naming the option when it lacks a method of {@link ResponseBodyStore}
 */
function requireResponseStore(value: unknown): ResponseBodyStore | undefined {
  if (value === undefined || isResponseBodyStore(value)) return value;
  throw invalidOption('responseStore', 'a ResponseBodyStore (put, get, delete, deleteExpired)', value);
}

function isResponseBodyStore(value: unknown): value is ResponseBodyStore {
  const store = value as Partial<ResponseBodyStore> | null | undefined;
  return typeof store === 'object' && store !== null && [store.put, store.get, store.delete, store.deleteExpired].every((method) => typeof method === 'function');
}

/** Whether `value` has what the store uses of an `etcd3` client: its KV and lease services and `watch()`. */
function isEtcdClient(value: unknown): value is Etcd3 {
  const client = value as Partial<Etcd3> | null | undefined;
  return typeof client === 'object' && client !== null && typeof client.kv?.txn === 'function' && typeof client.leaseClient?.leaseGrant === 'function' && typeof client.watch === 'function';
}
