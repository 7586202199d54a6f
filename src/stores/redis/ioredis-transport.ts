/**
 * The stores' commands on ioredis, one Redis (`Redis`) or Redis Cluster (`Cluster`): scripts and reads
 * routed by key, key walks over every master, a subscriber of its own, and the replica acknowledgement
 * (`WAIT`) on the node that owns a key.
 *
 * @module
 */
import type { Cluster, Redis } from 'ioredis';
import { coalesceWrites } from './coalesce.js';
import { framedSender, type FramedSend } from './ioredis-framing.js';
import type { ConnectionEvents, RedisArgument, RedisNode, RedisTransport, Subscriber } from './transport.js';

/**
 * The script and claim commands with replies as Buffers. ioredis defines a `…Buffer` variant of every
 * command at run time but types none for EVAL and EVALSHA. The store sends the claim and the scripts framed
 * (`ioredis-framing.ts`), and these named commands where it cannot: with `enableAutoPipelining` (whose
 * pipelines only the named commands feed; `callBuffer` cannot join them either), and for the EVAL of a
 * script Redis did not know.
 */
interface BufferCommands {
  evalshaBuffer(sha: string, keyCount: number, ...keysAndArgs: RedisArgument[]): Promise<unknown>;
  evalBuffer(source: string, keyCount: number, ...keysAndArgs: RedisArgument[]): Promise<unknown>;
}

/** Statuses of a connection on its way to `ready`; `reconnecting` (Redis down) is not one: it fails fast. */
const SETTING_UP: ReadonlySet<string> = new Set(['connecting', 'connect']);

/** The stores' commands on an ioredis `Redis` or `Cluster`. */
export class IoredisTransport implements RedisTransport {
  readonly cluster: boolean;
  readonly events: ConnectionEvents;
  private readonly framed: FramedSend | undefined;

  constructor(private readonly connection: Redis | Cluster) {
    this.cluster = connection.isCluster;
    this.events = connection;
    this.framed = framedSender(connection);
  }

  settingUp(): boolean {
    return SETTING_UP.has(this.connection.status);
  }

  runScript(sha: string, source: string, keys: readonly string[], args: readonly RedisArgument[]): Promise<unknown> {
    const scripting = this.connection as unknown as BufferCommands;
    coalesceWrites(this.connection);
    const sent = this.framed?.('evalsha', [sha, keys.length, ...keys, ...args]) ?? scripting.evalshaBuffer(sha, keys.length, ...keys, ...args);
    return sent.catch((error: unknown) => {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return scripting.evalBuffer(source, keys.length, ...keys, ...args);
    });
  }

  setIfAbsent(key: string, value: Buffer, ttlMs: number): Promise<Buffer | null> {
    coalesceWrites(this.connection);
    const { framed } = this;
    return framed === undefined ? (this.connection as Redis).setBuffer(key, value, 'PX', ttlMs, 'NX', 'GET') : (framed('set', [key, value, 'PX', ttlMs, 'NX', 'GET']) as Promise<Buffer | null>);
  }

  get(key: string): Promise<Buffer | null> {
    return this.connection.getBuffer(key);
  }

  getRange(key: string, start: number, end: number): Promise<Buffer> {
    return this.connection.getrangeBuffer(key, start, end);
  }

  time(): Promise<readonly (string | number)[]> {
    return (this.connection as Redis).time();
  }

  ping(): Promise<unknown> {
    return this.connection.ping();
  }

  /**
   * A pipeline is routed by its keyed commands, so the `EXISTS` pins the keyless `WAIT` to the key's master
   * on Cluster (on one Redis it is simply the same connection).
   */
  async waitForReplicas(key: string, replicas: number, timeoutMs: number): Promise<number> {
    const replies = await this.connection.pipeline().exists(key).call('WAIT', replicas, timeoutMs).exec();
    const [error, acknowledged] = replies?.[1] ?? [new Error('retrysafe: no reply to WAIT'), undefined];
    if (error) throw error;
    return Number(acknowledged);
  }

  /** Replicas hold copies, so masters alone see each key once (SCAN is local to the node it runs on). */
  masters(): readonly RedisNode[] {
    const { connection } = this;
    return (connection.isCluster ? (connection as Cluster).nodes('master') : [connection as Redis]).map(ioredisNode);
  }

  isRefusal(error: unknown): boolean {
    return error instanceof Error && error.name === 'ReplyError';
  }

  /**
   * An owned subscriber queues its SUBSCRIBE until connected, whatever the caller chose for the store's
   * connection, and connects at once rather than lazily. On Cluster, a PUBLISH reaches every node, so the
   * subscriber may listen on any of them.
   */
  subscriber(owned: boolean, onMessage: (channel: string) => void): Subscriber {
    const { connection } = this;
    const options = { enableOfflineQueue: true, lazyConnect: false };
    const listening = !owned ? connection : connection.isCluster ? (connection as Cluster).duplicate([], options) : (connection as Redis).duplicate(options);
    listening.on('message', onMessage);
    return {
      subscribe: (channel) => listening.subscribe(channel).then(() => undefined),
      unsubscribe: (channel) => listening.unsubscribe(channel).then(() => undefined),
      async close(channels) {
        listening.off('message', onMessage);
        if (owned) listening.disconnect();
        else if (channels.length > 0) await listening.unsubscribe(...channels);
      },
    };
  }
}

function ioredisNode(node: Redis): RedisNode {
  return {
    address: `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`,
    info: (section) => node.info(section),
    async configGet(parameter) {
      const reply: unknown = await node.call('CONFIG', 'GET', parameter);
      const value: unknown = Array.isArray(reply) ? reply[1] : undefined;
      return typeof value === 'string' ? value : undefined;
    },
    scan: (cursor, pattern, count) => node.scan(cursor, 'MATCH', pattern, 'COUNT', count),
  };
}
