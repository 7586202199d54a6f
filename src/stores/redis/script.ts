/**
 * Running a Lua script by its SHA-1 (EVALSHA), loading it on demand.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { RedisConnection } from './connection.js';

/** An argument of a Redis command: text, bytes or a number. */
type RedisArgument = string | Buffer | number;

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
   * Runs the script on `client` with replies as Buffers (bulk strings) and numbers (integers), so binary
   * fields survive untouched.
   *
   * @throws the driver's error when Redis fails or the script raises (after the NOSCRIPT retry)
   */
  async run(client: RedisConnection, keys: readonly string[], args: readonly RedisArgument[]): Promise<unknown> {
    try {
      return await client.callBuffer('EVALSHA', [this.sha, keys.length, ...keys, ...args]);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return await client.callBuffer('EVAL', [this.source, keys.length, ...keys, ...args]);
    }
  }
}
