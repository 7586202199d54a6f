/**
 * Opening an etcd store from a URL, with a client the store owns (for the CLI's `--store etcd://…`).
 *
 * @module
 */
import { Etcd3 } from 'etcd3';
import { closingClient, type IdempotencyStore } from '../../core/store.js';
import { createEtcdStore, type EtcdStoreOptions } from './factory.js';
import { etcdHosts } from './hosts.js';

/**
 * Connects to the etcd members of `url` (`etcd://HOST:PORT[,HOST:PORT…]`) and returns a store on that
 * client, once one round trip answered. Unlike {@link createEtcdStore}, the store owns the client: its
 * `close()` also closes it.
 *
 * @param options - the options of {@link createEtcdStore} other than the client
 * @throws TypeError when `url` is not such a URL, or an option is invalid
 * @throws the driver's error when no member answers (the client is closed first)
 * @example
 * ```ts
 * import { openEtcdStore } from 'retrysafe/etcd';
 * const store = await openEtcdStore('etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379', { prefix: 'payments' });
 * // … later
 * await store.close();
 * ```
 */
export async function openEtcdStore(url: string, options: Omit<EtcdStoreOptions, 'client'> = {}): Promise<IdempotencyStore> {
  const client = new Etcd3({ hosts: etcdHosts(url), dialTimeout: 5_000 });
  let store: ReturnType<typeof createEtcdStore>;
  try {
    store = createEtcdStore({ ...options, client });
    await store.ping();
  } catch (error) {
    client.close();
    throw error;
  }
  return closingClient(store, () => client.close());
}
