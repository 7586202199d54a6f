/**
 * The seam between the Redis stores and the driver: every command the stores send, in the shape they need
 * (bulk-string replies as Buffers, Redis's own integers as numbers), whichever client the caller gave. The
 * atomic logic (scripts, layout, fencing, leases, the clock bound) sits above it and is the same for both.
 *
 * @module
 */
import { isIoredisConnection, type RedisConnection } from './connection.js';
import { IoredisTransport } from './ioredis-transport.js';
import { NodeRedisTransport } from './node-redis-transport.js';

/** An argument of a Redis command: text, bytes or a number. */
export type RedisArgument = string | Buffer | number;

/** One Redis server (the one Redis, or one master of a Cluster), for the checks and walks that visit each. */
export interface RedisNode {
  /** The server, as `host:port`. */
  readonly address: string;
  /** `INFO section`, the reply as text. */
  info(section: string): Promise<string>;
  /** `CONFIG GET parameter`, the value as text, or `undefined` when the reply names none. */
  configGet(parameter: string): Promise<string | undefined>;
  /** One `SCAN cursor MATCH pattern COUNT count` step: the next cursor (`'0'` when done) and its keys. */
  scan(cursor: string, pattern: string, count: number): Promise<readonly [string, string[]]>;
}

/** A connection in subscriber mode, for the completion notices of `waitFor`. */
export interface Subscriber {
  /** `SUBSCRIBE channel`; resolves once Redis acknowledged it (a `PUBLISH` after that is delivered). */
  subscribe(channel: string): Promise<void>;
  /** `UNSUBSCRIBE channel`. */
  unsubscribe(channel: string): Promise<void>;
  /**
   * Stops delivering messages; then disconnects a connection the store opened, or unsubscribes a caller's
   * from `channels` (leaving it open).
   */
  close(channels: readonly string[]): Promise<void>;
}

/** What the stores send to Redis. Each command rejects with the driver's error when Redis fails or refuses it. */
export interface RedisTransport {
  /** An ioredis `Cluster`: commands are routed by key's slot, and Redis has no one clock to bound. */
  readonly cluster: boolean;
  /**
   * The emitter of the connection's `ready`, `error` and `end` events (the client itself): the store reads
   * its servers again on each `ready`, and waits for the first one (`ready.ts`).
   */
  readonly events: ConnectionEvents;
  /** The connection is being set up (just created, or connecting again and not yet ready), not down or closed. */
  settingUp(): boolean;
  /**
   * `EVALSHA sha` on `keys` and `args`, replies as Buffers (bulk strings) and numbers (integers); on
   * `NOSCRIPT`, once more as `EVAL source`, which caches it again. Leaves with the commands sent in this
   * turn of the event loop, in one socket write.
   */
  runScript(sha: string, source: string, keys: readonly string[], args: readonly RedisArgument[]): Promise<unknown>;
  /** `SET key value PX ttlMs NX GET` (Redis 7 and later): `null` when it wrote, else the standing value. Batched as {@link RedisTransport.runScript}. */
  setIfAbsent(key: string, value: Buffer, ttlMs: number): Promise<Buffer | null>;
  /** `GET key`, as a Buffer, or `null`. */
  get(key: string): Promise<Buffer | null>;
  /** `GETRANGE key start end` (inclusive byte offsets), as a Buffer (empty for a missing key). */
  getRange(key: string, start: number, end: number): Promise<Buffer>;
  /** `TIME`: seconds and microseconds, as Redis wrote them. */
  time(): Promise<readonly (string | number)[]>;
  /** `PING`. */
  ping(): Promise<unknown>;
  /**
   * `WAIT replicas timeoutMs` on the server that owns `key`: how many replicas acknowledged every write that
   * server took before it.
   */
  waitForReplicas(key: string, replicas: number, timeoutMs: number): Promise<number>;
  /** The servers a key walk or a configuration check visits: the one Redis, or every master of the Cluster. */
  masters(): readonly RedisNode[];
  /** A reply error of the server (unknown, renamed or denied command), as opposed to a failed connection. */
  isRefusal(error: unknown): boolean;
  /**
   * A subscriber on this connection (`owned: false`, the caller's dedicated `subscriber`) or on a new one
   * like it that connects at once and queues its commands until ready (`owned: true`), delivering the
   * channel of each message to `onMessage`.
   */
  subscriber(owned: boolean, onMessage: (channel: string) => void): Subscriber;
}

/** The connection events the stores listen to. */
export interface ConnectionEvents {
  on(event: string, listener: () => void): unknown;
  once(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** One transport per connection, so its listeners are added once however many stores share the connection. */
const transports = new WeakMap<object, RedisTransport>();

/** The transport of `connection` (an ioredis `Redis` or `Cluster`, or a node-redis client). */
export function transportOf(connection: RedisConnection): RedisTransport {
  let transport = transports.get(connection);
  if (transport === undefined) {
    transport = isIoredisConnection(connection) ? new IoredisTransport(connection) : new NodeRedisTransport(connection);
    transports.set(connection, transport);
  }
  return transport;
}

/**
 * Every key matching `pattern`, one SCAN step (about `count` keys) at a time, over every master in turn. A
 * key may come twice (SCAN's own guarantee); a key added or removed during the walk may or may not come.
 */
export async function* scanKeys(transport: RedisTransport, pattern: string, count: number): AsyncGenerator<string[]> {
  for (const node of transport.masters()) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, pattern, count);
      cursor = next;
      yield keys;
    } while (cursor !== '0');
  }
}
