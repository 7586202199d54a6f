/**
 * Walking every record under the store's prefix, a page at a time.
 *
 * @module
 */
import type { KVClient } from 'etcd3';
import { decodeRecord, type StoredRecord } from './layout.js';

/** Keys asked of each range read of a walk (bounds the reply, and the memory a page takes). */
const PAGE_SIZE = 256;

/** The first key after every key that starts with `prefix` (its last byte below 0xff incremented). */
function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  let i = end.length - 1;
  while (i >= 0 && end[i] === 0xff) i--;
  if (i < 0) return Buffer.from([0]);
  end[i] = (end[i] as number) + 1;
  return end.subarray(0, i + 1);
}

/**
 * Every record under `prefix`, in pages of up to {@link PAGE_SIZE}, in key byte order. Each page is one
 * linearizable range read; the walk is not a snapshot (a record written meanwhile may or may not appear).
 */
export async function* scanRecords(kv: KVClient, prefix: Buffer): AsyncGenerator<StoredRecord[]> {
  const end = prefixEnd(prefix);
  let from = prefix;
  for (;;) {
    const reply = await kv.range({ key: from, range_end: end, limit: PAGE_SIZE });
    const last = reply.kvs.at(-1);
    yield reply.kvs.map((kv) => decodeRecord(kv.value, kv.mod_revision));
    if (!reply.more || last === undefined) return;
    from = Buffer.concat([last.key, Buffer.from([0])]);
  }
}
