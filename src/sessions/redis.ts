/**
 * The Redis session store (`ioredis` or node-redis): each session is three keys under one Redis Cluster hash tag — the
 * session hash (`state`, `lease`, `lwm`), its saved responses and its executions in progress — and each
 * contract method is one Lua script on them, run with EVALSHA, so every step is atomic and touches one slot.
 *
 * @module
 */
import { describe } from '../core/validate.js';
import { isRedisConnection, type RedisConnection } from '../stores/redis/connection.js';
import { parseRecordKey, recordKey, recordPattern } from '../stores/redis/keys.js';
import { LuaScript } from '../stores/redis/script.js';
import { type RedisTransport, scanKeys, transportOf } from '../stores/redis/transport.js';
import { BEGIN_SESSION_LUA } from './redis-scripts/begin.lua.js';
import { COMPLETE_SESSION_LUA } from './redis-scripts/complete.lua.js';
import { CREATE_SESSION_LUA } from './redis-scripts/create.lua.js';
import { END_SESSION_LUA } from './redis-scripts/end.lua.js';
import { KEEP_ALIVE_SESSION_LUA } from './redis-scripts/keep-alive.lua.js';
import { REAP_SESSION_LUA } from './redis-scripts/reap.lua.js';
import { RELEASE_SESSION_LUA } from './redis-scripts/release.lua.js';
import { STATS_SESSION_LUA } from './redis-scripts/stats.lua.js';
import { SUMMARY_SESSION_LUA } from './redis-scripts/summary.lua.js';
import type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionStats, SessionStore, SessionSummary } from './store.js';
import { requireLimit, requireOptions } from '../core/validate.js';

/** Options of {@link createRedisSessionStore}. */
export interface RedisSessionStoreOptions {
  /**
   * The connection the store runs its scripts on: an ioredis `Redis` or `Cluster` (`reap` then walks every
   * master), or a node-redis client to one Redis (`createClient()` of `redis` 6, connected). Caller-owned:
   * `close()` leaves it open. Give an ioredis connection `enableOfflineQueue: false` (or a small
   * `maxRetriesPerRequest`), a node-redis client `disableOfflineQueue: true`, so that, with Redis down,
   * operations reject at once and the receiver answers `StoreUnavailableError` instead of queueing requests.
   */
  readonly client: RedisConnection;
  /**
   * Namespace of every key the store writes: sessions live at `${prefix}:{…}`. Must be non-empty and hold no
   * `{` or `}` (the braces delimit the Redis Cluster hash tag). Keep it apart from an idempotency store's
   * prefix so `reap` walks only sessions. @defaultValue 'retrysafe-sessions'
   */
  readonly prefix?: string;
}

/**
 * The grace (ms) added to a session's remaining lease to form its keys' real TTL. Leases are decided by the
 * receiver's clock inside the scripts; the TTL is only a safety net that frees a session nobody reaps, and
 * keeps an expired session's tombstone this long, after which the client meets `session-unknown` instead
 * of `session-expired` (both refuse the request).
 */
export const REDIS_SESSION_TTL_GRACE_MS = 86_400_000;

/** Keys asked of each SCAN step of `reap` (a hint to Redis, which bounds the work per step). */
const SCAN_COUNT = 250;

const CREATE = new LuaScript(CREATE_SESSION_LUA);
const BEGIN = new LuaScript(BEGIN_SESSION_LUA);
const COMPLETE = new LuaScript(COMPLETE_SESSION_LUA);
const RELEASE = new LuaScript(RELEASE_SESSION_LUA);
const KEEP_ALIVE = new LuaScript(KEEP_ALIVE_SESSION_LUA);
const END = new LuaScript(END_SESSION_LUA);
const REAP = new LuaScript(REAP_SESSION_LUA);
const STATS = new LuaScript(STATS_SESSION_LUA);
const SUMMARY = new LuaScript(SUMMARY_SESSION_LUA);

/** The hash-tag scope of every session key: `${prefix}:{session\0<client id>}`. */
const SESSION_SCOPE = 'session';

interface RedisSessionConfig {
  readonly client: RedisTransport;
  readonly prefix: string;
}

/**
 * Creates a {@link SessionStore} on Redis: the session-based Idempotent Receiver of *Patterns of
 * Distributed Systems*, with Raft's client sessions (Ongaro's thesis, section 6.3).
 *
 * - Every key of one session shares the hash tag of its client id (`${prefix}:{session\0<id>}`, then
 *   `…:responses` and `…:pending`), so each script touches one slot and the store runs on Redis Cluster.
 * - Each contract method is one Lua script: N parallel `begin`s of one request number, from any number of
 *   connections or processes, yield one `execute`; `complete`/`release` are fenced by the token.
 * - Leases are decided by the `now` the receiver passes in (ms since the epoch, from its clock), so
 *   processes sharing a store need clocks in sync to well within a lease. Each key also carries a real
 *   `PEXPIRE` of the remaining lease plus {@link REDIS_SESSION_TTL_GRACE_MS} as a safety net.
 * - `keepAlive` and `begin` raise the low-water mark and delete requests at or below it in the same script,
 *   so memory stays bounded by the requests the client has not acknowledged.
 * - `reap` walks the prefix with SCAN in steps of about 250 keys and deletes sessions whose lease ended
 *   (re-checked atomically per session), stopping at `limit`; each call starts a fresh walk, so it costs up
 *   to O(keys under the prefix). On Redis Cluster (an ioredis `Cluster` as `client`) it visits every master.
 * - `listSessions` walks the whole prefix the same way (Redis keeps no ordered index of sessions), keeping
 *   only one page of client ids in memory, then reads each session of the page with one script.
 *
 * Errors: operations reject with the driver's error when Redis fails; the receiver maps that to
 * `StoreUnavailableError`.
 *
 * @throws TypeError naming the option when `client` or `prefix` is invalid
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { createRedisSessionStore, createSessionReceiver } from 'retrysafe/sessions';
 *
 * const client = new Redis('redis://127.0.0.1:6379', { enableOfflineQueue: false });
 * const receiver = createSessionReceiver({ store: createRedisSessionStore({ client }) });
 * ```
 */
export function createRedisSessionStore(options: RedisSessionStoreOptions): SessionStore & Pick<Required<SessionStore>, 'listSessions'> {
  requireOptions('createRedisSessionStore', options);
  const { client, prefix = 'retrysafe-sessions' } = options;
  if (!isRedisConnection(client)) {
    throw new TypeError(`retrysafe: option "client" must be an ioredis Redis or Cluster connection, or a node-redis client (createClient), got ${describe(client)}`);
  }
  if (typeof prefix !== 'string' || prefix.length === 0 || /[{}]/.test(prefix)) {
    throw new TypeError(`retrysafe: option "prefix" must be a non-empty string without braces, got ${describe(prefix)}`);
  }
  return new RedisSessionStore(Object.freeze({ client: transportOf(client), prefix }));
}

/** A bulk-string reply as text. */
function text(reply: unknown): string {
  return Buffer.isBuffer(reply) ? reply.toString('utf8') : String(reply);
}

class RedisSessionStore implements SessionStore {
  constructor(private readonly config: RedisSessionConfig) {}

  async create(clientId: string, now: number, leaseMs: number): Promise<boolean> {
    const reply = await CREATE.run(this.config.client, this.keys(clientId), [now + leaseMs, leaseMs + REDIS_SESSION_TTL_GRACE_MS]);
    return reply === 1;
  }

  async begin(input: BeginInput): Promise<BeginResult> {
    const reply = (await BEGIN.run(this.config.client, this.keys(input.clientId), [
      input.now,
      input.requestNumber,
      input.lowWaterMark,
      input.now + input.sessionLeaseMs,
      input.now + input.executionLeaseMs,
      input.token,
      REDIS_SESSION_TTL_GRACE_MS,
    ])) as unknown[];
    const outcome = text(reply[0]);
    switch (outcome) {
      case 'unknown':
      case 'expired':
      case 'in_flight':
        return { outcome };
      case 'stale':
        return { outcome, lowWaterMark: Number(reply[1]) };
      case 'replay':
        return { outcome, response: text(reply[1]) };
      case 'execute':
        return { outcome, takeover: reply[1] === 1 };
      default:
        throw new Error(`retrysafe: unexpected reply from the Redis session begin script: ${outcome}`);
    }
  }

  async complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean> {
    return (await COMPLETE.run(this.config.client, this.keys(clientId), [requestNumber, token, response])) === 1;
  }

  async release(clientId: string, requestNumber: number, token: string): Promise<boolean> {
    const pending = this.keys(clientId)[2];
    return (await RELEASE.run(this.config.client, [pending], [requestNumber, token])) === 1;
  }

  async keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult> {
    const reply = await KEEP_ALIVE.run(this.config.client, this.keys(clientId), [now, lowWaterMark, now + leaseMs, REDIS_SESSION_TTL_GRACE_MS]);
    return text(reply) as KeepAliveResult;
  }

  async end(clientId: string): Promise<boolean> {
    return (await END.run(this.config.client, this.keys(clientId), [])) === 1;
  }

  async reap(now: number, limit: number): Promise<number> {
    let deleted = 0;
    for await (const found of scanKeys(this.config.client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      // Only session hashes end with the tag's brace; their responses and pending keys carry a suffix.
      const sessions = found.filter((key) => key.endsWith('}'));
      // Pipelined in slices no larger than what is left of `limit`, so the count never overshoots it.
      for (let i = 0; i < sessions.length && deleted < limit; ) {
        const slice = sessions.slice(i, i + (limit - deleted));
        i += slice.length;
        const replies = await Promise.all(
          slice.map((key) => REAP.run(this.config.client, [key, `${key}:responses`, `${key}:pending`], [now])),
        );
        deleted += replies.filter((reply) => reply === 1).length;
      }
      if (deleted >= limit) break;
    }
    return deleted;
  }

  async stats(clientId: string): Promise<SessionStats | undefined> {
    const reply = (await STATS.run(this.config.client, this.keys(clientId), [])) as unknown[] | null;
    if (reply === null) return undefined;
    return {
      state: text(reply[0]) === 'expired' ? 'expired' : 'live',
      lowWaterMark: Number(text(reply[1])),
      leaseExpiresAt: Number(text(reply[2])),
      storedResponses: Number(reply[3]),
      inProgress: Number(reply[4]),
    };
  }

  /**
   * One page in client-id order (JavaScript string order): SCAN over the prefix, keeping the first
   * `query.limit` matching ids, then one `summary` script per session of the page. Costs O(keys under the
   * prefix) per page; a session deleted between the walk and its read is left out.
   */
  async listSessions(query: SessionQuery): Promise<SessionSummary[]> {
    const { limit, clientIdPrefix, after } = query;
    requireLimit('listSessions', limit);
    // SCAN may return a key twice: a set keeps each id once.
    let page = new Set<string>();
    for await (const found of scanKeys(this.config.client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      for (const key of found) {
        const parsed = parseRecordKey(this.config.prefix, key);
        if (parsed === undefined || parsed[0] !== SESSION_SCOPE) continue;
        const clientId = parsed[1];
        if (clientIdPrefix !== undefined && !clientId.startsWith(clientIdPrefix)) continue;
        if (after !== undefined && clientId <= after) continue;
        page.add(clientId);
      }
      if (page.size > limit) page = new Set([...page].sort().slice(0, limit));
    }
    const ids = [...page].sort();
    const replies = await Promise.all(ids.map((clientId) => SUMMARY.run(this.config.client, this.keys(clientId), []) as Promise<unknown[] | null>));
    return ids.flatMap((clientId, i): SessionSummary[] => {
      const reply = replies[i];
      if (reply == null) return [];
      const highest = Number(reply[5]);
      return [
        {
          clientId,
          state: text(reply[0]) === 'expired' ? 'expired' : 'live',
          lowWaterMark: Number(text(reply[1])),
          leaseExpiresAt: Number(text(reply[2])),
          storedResponses: Number(reply[3]),
          inProgress: Number(reply[4]),
          ...(highest >= 0 && { highestRequestNumber: highest }),
        },
      ];
    });
  }

  /** Nothing to release: the connection is the caller's. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** The session hash, its saved responses and its executions in progress: one hash tag, one slot. */
  private keys(clientId: string): [string, string, string] {
    const session = recordKey(this.config.prefix, SESSION_SCOPE, clientId);
    return [session, `${session}:responses`, `${session}:pending`];
  }
}
