/**
 * Running a Lua script by its SHA-1 (EVALSHA), loading it on demand.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { RedisArgument, RedisTransport } from './transport.js';

/**
 * One Lua script, run with EVALSHA so a call costs one round trip and sends only the 40-character digest.
 * Redis answers `NOSCRIPT` when its script cache lacks the digest — first use, `SCRIPT FLUSH`, a failover
 * to a replica that never saw it, or a restart (the cache is not persisted) — and the call is then retried
 * once with EVAL, which runs the script and caches it again for the next EVALSHA.
 */
export class LuaScript {
  /** Hex SHA-1 of the source, as Redis computes it. */
  readonly sha: string;

  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  /**
   * Runs the script on `transport` with replies as Buffers (bulk strings) and numbers (integers), so binary
   * fields survive untouched. The command leaves with the others sent in this turn of the event loop, in
   * one socket write (`coalesce.ts` for ioredis; node-redis batches by itself).
   *
   * @throws the driver's error when Redis fails or the script raises (after the NOSCRIPT retry)
   */
  run(transport: RedisTransport, keys: readonly string[], args: readonly RedisArgument[]): Promise<unknown> {
    return transport.runScript(this.sha, this.source, keys, args);
  }
}

/**
 * `source` with the Redis 7 shebang that lets it run, and write, while the server is over `maxmemory`
 * (`#!lua flags=allow-oom`). The store gives it to the writes that finish work already admitted (the
 * completion, the recovery point), so that under `noeviction` at the limit only new claims are refused:
 * a won claim's response is always saved rather than answered and lost. Redis before 7.0 reads the shebang
 * as a syntax error, so the store sends these only to servers that report 7.0 or later.
 */
export function allowingOom(source: string): string {
  return `#!lua flags=allow-oom\n${source}`;
}
