/**
 * The members of an `etcd://` URL, read without the driver, so `retrysafe/store-url` can check a value
 * without loading `etcd3`.
 *
 * @module
 */
import { describe } from '../../core/validate.js';

/**
 * The client URLs of an `etcd://HOST:PORT[,HOST:PORT…]` value (its path and query left out), as
 * `http://HOST:PORT` each.
 *
 * @throws TypeError when `url` is not `etcd://` followed by at least one `HOST:PORT`
 */
export function etcdHosts(url: string): string[] {
  const match = typeof url === 'string' ? /^etcd:\/\/([^/?#]+)/i.exec(url) : null;
  const hosts = match?.[1]?.split(',') ?? [];
  if (hosts.length === 0 || hosts.some((host) => !/^[^\s:@]+:\d{1,5}$/.test(host) && !/^\[[0-9a-f:.]+\]:\d{1,5}$/i.test(host))) {
    throw new TypeError(`retrysafe: the etcd URL must be etcd://HOST:PORT[,HOST:PORT…], got ${describe(url)}`);
  }
  return hosts.map((host) => `http://${host}`);
}
