/**
 * The side store of large response bodies: where a store whose records cannot hold a large body (etcd
 * refuses requests over 1.5 MiB) keeps it, while the record and its lease stay where they are.
 *
 * @module
 */

/**
 * Which body: the record's (scope, key) and the fencing token of the claim that completed it (a decimal
 * string). A later claim of the key carries a larger token, so a body written by a holder that lost its
 * lease is never read for another holder's completion.
 */
export interface ResponseBodyId {
  readonly scope: string;
  readonly key: string;
  readonly fencingToken: string;
}

/**
 * A key-value store of response bodies, keyed by {@link ResponseBodyId}. `createPostgresResponseBodies`
 * (`retrysafe/postgres`) and `createSqliteResponseBodies` (`retrysafe/sqlite`) implement it; any store
 * that keeps bytes as given and answers after the write is durable does.
 *
 * Errors: every method rejects with the backend's error when it fails; the record store then rejects
 * the operation it was part of.
 */
export interface ResponseBodyStore {
  /**
   * Writes `body` under `id`, replacing a body already there, to be kept until `expiresAt` (milliseconds
   * since the epoch, on the record store's clock). Resolves once the write is durable.
   */
  put(id: ResponseBodyId, body: Uint8Array, expiresAt: number): Promise<void>;
  /** The body under `id` byte for byte, or `undefined` when there is none (whatever its `expiresAt`). */
  get(id: ResponseBodyId): Promise<Uint8Array | undefined>;
  /** Deletes the body under `id`; resolves whether one was there. */
  delete(id: ResponseBodyId): Promise<boolean>;
  /**
   * Deletes up to `limit` bodies whose `expiresAt` is at or before `now` (milliseconds since the epoch,
   * the record store's clock); resolves how many it deleted.
   */
  deleteExpired(now: number, limit: number): Promise<number>;
  /** Releases what the store owns (a connection it opened); one it was given is left open. */
  close(): Promise<void>;
}
