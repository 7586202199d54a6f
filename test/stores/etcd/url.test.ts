/**
 * `etcd://` store URLs: parsing (`retrysafe/store-url`), `openEtcdStore`, and the CLI on a one-member
 * etcd the file starts itself.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { parseStoreUrl, StoreUrlError, type OpenedStore } from '../../../src/store-url.js';
import { etcdHosts } from '../../../src/stores/etcd/hosts.js';
import { etcdAvailable, startEtcd } from '../../support/etcd.js';
import { runCli } from '../../support/run-cli.js';
import { freePort } from '../../support/services.js';

describe('etcd:// store URLs', () => {
  it('names one member or several, and a prefix', () => {
    expect(etcdHosts('etcd://10.0.0.1:2379,10.0.0.2:2379,[::1]:2379')).toEqual(['http://10.0.0.1:2379', 'http://10.0.0.2:2379', 'http://[::1]:2379']);
    expect(parseStoreUrl('etcd://127.0.0.1:2379?prefix=payments')).toMatchObject({
      scheme: 'etcd',
      driverUrl: 'etcd://127.0.0.1:2379',
      durable: true,
      transactional: false,
    });
  });

  it.each([
    ['etcd://', /etcd: needs the members/],
    ['etcd://127.0.0.1', /etcd: needs the members/],
    ['etcd://a:1,,b:2', /etcd: needs the members/],
    ['etcd://127.0.0.1:2379?prefix=', /\?prefix= must be non-empty/],
    ['etcd://127.0.0.1:2379?schema=x', /one query parameter, \?prefix=NAME/],
  ])('refuses %s', (url, reason) => {
    expect(() => parseStoreUrl(url)).toThrow(StoreUrlError);
    expect(() => parseStoreUrl(url)).toThrow(reason);
  });
});

if (await etcdAvailable()) {
  describe('--store etcd://', async () => {
    const cluster = await startEtcd(1);
    const url = `etcd://${cluster.hosts[0]?.replace('http://', '') ?? ''}`;
    const opened: OpenedStore[] = [];
    afterAll(async () => {
      await Promise.all(opened.map((store) => store.store.close()));
      await cluster.stop();
    });

    it('opens a plain store that claims once across two clients, under the ?prefix= it names', async () => {
      const one = await parseStoreUrl(`${url}?prefix=a`).open('create');
      const two = await parseStoreUrl(`${url}?prefix=a`).open('create');
      const other = await parseStoreUrl(url).open('create');
      opened.push(one, two, other);
      expect([one.scheme, one.transactional, one.store.kind]).toEqual(['etcd', false, 'etcd']);
      const input = { scope: 'cli', key: 'k', fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 };
      const results = await Promise.all([one.store.claim(input), two.store.claim(input)]);
      expect(results.filter((result) => result.acquired)).toHaveLength(1);
      expect(await other.store.get('cli', 'k')).toBeUndefined();
    });

    it('runs inspect on it, and exits 2 naming the URL when nothing listens', async () => {
      const store = await parseStoreUrl(url).open('create');
      opened.push(store);
      const claim = await store.store.claim({ scope: '', key: 'inspected', fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 });
      if (!claim.acquired) throw new Error('expected to win the claim');
      await store.store.complete(claim.claim, { status: 200, headers: {}, body: new TextEncoder().encode('ok') }, 60_000);
      const inspected = await runCli(['inspect', '--store', url, 'inspected']);
      expect(inspected.code).toBe(0);
      expect(JSON.parse(inspected.stdout)).toMatchObject({ key: 'inspected', state: 'completed', response: { status: 200 } });
      const refused = await runCli(['inspect', '--store', `etcd://127.0.0.1:${await freePort()}`, 'inspected']);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/^retrysafe: cannot reach the store at etcd:\/\/127\.0\.0\.1:\d+: /);
    });
  });
}
