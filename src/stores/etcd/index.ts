/**
 * `retrysafe/etcd`: the etcd v3 idempotency store, on the `etcd3` driver. When etcd is the right store,
 * and what a consensus write costs, is in docs/etcd.md.
 *
 * @module
 */
export { createEtcdStore, type EtcdStoreOptions } from './factory.js';
export type { EtcdStore } from './etcd-store.js';
export { ETCD_LEASE_GRACE_MS } from './leases.js';
export { openEtcdStore } from './url.js';
export type { ResponseBodyId, ResponseBodyStore } from '../../core/response-bodies.js';
