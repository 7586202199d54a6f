/**
 * The one kind of write the etcd store makes: a transaction that puts or deletes a record only if its key
 * is unchanged since it was read (or was never created), and otherwise reads it back.
 *
 * @module
 */
import { EtcdLeaseInvalidError, type IKeyValue, type ITxnResponse, type KVClient } from 'etcd3';
import type { IdempotencyRecord } from '../../core/record.js';
import { encodeRecord, type ExternalBody } from './layout.js';
import type { RecordLeases } from './leases.js';

/**
 * What a write does: put `put` (with its fencing token, `undefined` on the claim's own write, and whether the
 * claim took the record over, and `external` when its body is in the side store), under a record lease
 * alive at least `untilMs` milliseconds from now; or delete the record.
 */
export type Write =
  | {
      readonly put: IdempotencyRecord;
      readonly fence: string | undefined;
      readonly takeover: boolean;
      readonly untilMs: number;
      readonly external?: ExternalBody;
    }
  | { readonly delete: true };

/** Runs conditional writes on one etcd client's KV service. */
export class ConditionalWriter {
  constructor(
    private readonly kv: KVClient,
    private readonly leases: RecordLeases,
  ) {}

  /**
   * One transaction: `write` if the key's `mod_revision` is still `modRevision` (or, when `undefined`, the
   * key does not exist: `create_revision == 0`), else a read of the key. A record lease etcd no longer knows
   * (revoked, or expired while a fake clock stood still) is forgotten and the write sent once more with a new one.
   */
  async write(key: Buffer, modRevision: string | undefined, write: Write): Promise<ITxnResponse> {
    try {
      return await this.send(key, modRevision, write);
    } catch (error) {
      if (!(error instanceof EtcdLeaseInvalidError) || !('put' in write)) throw error;
      this.leases.forgetAll();
      return await this.send(key, modRevision, write);
    }
  }

  private async send(key: Buffer, modRevision: string | undefined, write: Write): Promise<ITxnResponse> {
    const compare =
      modRevision === undefined
        ? { key, target: 'Create' as const, result: 'Equal' as const, create_revision: 0 }
        : { key, target: 'Mod' as const, result: 'Equal' as const, mod_revision: modRevision };
    const op =
      'put' in write
        ? { request_put: { key, value: encodeRecord(write.put, write.fence, write.takeover, write.external), lease: await this.leases.leaseFor(write.untilMs) } }
        : { request_delete_range: { key } };
    return await this.kv.txn({ compare: [compare], success: [op], failure: [{ request_range: { key } }] });
  }
}

/** The key-value the failure branch's read returned, or `undefined` when the key is gone. */
export function rangeOf(reply: ITxnResponse): IKeyValue | undefined {
  return reply.responses[0]?.response_range.kvs[0];
}
