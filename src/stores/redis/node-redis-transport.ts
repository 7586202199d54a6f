/**
 * The stores' commands on node-redis (`createClient()` of the `redis` package), one Redis: every command
 * through `sendCommand`, bulk-string replies mapped to Buffers. node-redis queues each command and writes
 * the queue in `setImmediate`, corked, so the commands of one turn of the event loop already leave in one
 * socket write (what `coalesce.ts` does for ioredis).
 *
 * @module
 */
import type { ConnectionEvents, RedisArgument, RedisNode, RedisTransport, Subscriber } from './transport.js';

/** A node-redis pub/sub listener: the message, then its channel. */
type MessageListener = (message: string, channel: string) => void;

/**
 * What the stores call of a node-redis client (`RedisClientType` of `redis` 6, any modules, scripts,
 * RESP version or type mapping), by shape, so neither the package nor its types are needed to load the store.
 */
export interface NodeRedisClient extends ConnectionEvents {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  readonly options?: { readonly socket?: object } | undefined;
  sendCommand(args: readonly (string | Buffer)[], options?: { readonly typeMapping?: object }): Promise<unknown>;
  duplicate(overrides?: { readonly disableOfflineQueue?: boolean }): NodeRedisClient;
  connect(): Promise<unknown>;
  subscribe(channels: string | string[], listener: MessageListener): Promise<unknown>;
  unsubscribe(channels?: string | string[], listener?: MessageListener): Promise<unknown>;
  destroy(): void;
  createPool(...args: never[]): unknown;
}

/** Command options mapping bulk strings (RESP type `$`, 36) to Buffers, so binary fields survive untouched. */
const BUFFERS = Object.freeze({ typeMapping: Object.freeze({ 36: Buffer }) });

/** A command argument as node-redis takes it: numbers as their decimal text. */
function argument(value: RedisArgument): string | Buffer {
  return typeof value === 'number' ? String(value) : value;
}

/** The stores' commands on a node-redis client. */
export class NodeRedisTransport implements RedisTransport {
  readonly cluster = false;
  readonly events: ConnectionEvents;
  /** The client's first connection attempt ended (ready, failed or closed): from then on a client not ready is down. */
  private attempted: boolean;

  constructor(private readonly client: NodeRedisClient) {
    this.events = client;
    this.attempted = client.isReady;
    if (this.attempted) return;
    const over = (): void => {
      this.attempted = true;
      client.off('ready', over);
      client.off('error', over);
      client.off('end', over);
    };
    client.once('ready', over);
    client.once('error', over);
    client.once('end', over);
  }

  /**
   * node-redis tells a client connecting apart from one waiting to reconnect by events only, so a client is
   * taken as setting up until its first attempt ends; later it is either ready or down (fails fast).
   */
  settingUp(): boolean {
    return !this.attempted && this.client.isOpen && !this.client.isReady;
  }

  async runScript(sha: string, source: string, keys: readonly string[], args: readonly RedisArgument[]): Promise<unknown> {
    const rest = [String(keys.length), ...keys, ...args.map(argument)];
    try {
      return await this.client.sendCommand(['EVALSHA', sha, ...rest], BUFFERS);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return this.client.sendCommand(['EVAL', source, ...rest], BUFFERS);
    }
  }

  setIfAbsent(key: string, value: Buffer, ttlMs: number): Promise<Buffer | null> {
    return this.client.sendCommand(['SET', key, value, 'PX', String(ttlMs), 'NX', 'GET'], BUFFERS) as Promise<Buffer | null>;
  }

  get(key: string): Promise<Buffer | null> {
    return this.client.sendCommand(['GET', key], BUFFERS) as Promise<Buffer | null>;
  }

  getRange(key: string, start: number, end: number): Promise<Buffer> {
    return this.client.sendCommand(['GETRANGE', key, String(start), String(end)], BUFFERS) as Promise<Buffer>;
  }

  time(): Promise<readonly (string | number)[]> {
    return this.client.sendCommand(['TIME']) as Promise<string[]>;
  }

  ping(): Promise<unknown> {
    return this.client.sendCommand(['PING']);
  }

  async waitForReplicas(_key: string, replicas: number, timeoutMs: number): Promise<number> {
    return Number(await this.client.sendCommand(['WAIT', String(replicas), String(timeoutMs)]));
  }

  masters(): readonly RedisNode[] {
    const { client } = this;
    const socket = (client.options?.socket ?? {}) as { readonly host?: string; readonly port?: number };
    return [
      {
        address: `${socket.host ?? '127.0.0.1'}:${socket.port ?? 6379}`,
        info: async (section) => String(await client.sendCommand(['INFO', section])),
        async configGet(parameter) {
          const reply = await client.sendCommand(['CONFIG', 'GET', parameter]);
          // RESP2 answers a flat array of names and values, RESP3 a map (an object or a Map by type mapping).
          const value: unknown = Array.isArray(reply) ? reply[1] : reply instanceof Map ? reply.get(parameter) : (reply as Record<string, unknown> | null)?.[parameter];
          return typeof value === 'string' ? value : undefined;
        },
        scan: (cursor, pattern, count) => client.sendCommand(['SCAN', cursor, 'MATCH', pattern, 'COUNT', String(count)]) as Promise<[string, string[]]>,
      },
    ];
  }

  /** node-redis's reply errors are `ErrorReply`s (`SimpleError`, `BlobError`), found by their class chain. */
  isRefusal(error: unknown): boolean {
    for (let proto: unknown = error instanceof Error ? Object.getPrototypeOf(error) : null; proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
      if ((proto as { constructor?: { name?: string } }).constructor?.name === 'ErrorReply') return true;
    }
    return false;
  }

  /**
   * An owned subscriber is a duplicate that queues its commands until ready (whatever the caller chose for
   * the store's client) and connects at once; its connection errors reach the SUBSCRIBE that fails on
   * them, not the process (an `error` without a listener would throw).
   */
  subscriber(owned: boolean, onMessage: (channel: string) => void): Subscriber {
    const listening = owned ? this.client.duplicate({ disableOfflineQueue: false }) : this.client;
    if (owned) {
      listening.on('error', () => undefined);
      listening.connect().catch(() => undefined);
    }
    const listener: MessageListener = (_message, channel) => onMessage(channel);
    return {
      subscribe: (channel) => listening.subscribe(channel, listener).then(() => undefined),
      unsubscribe: (channel) => listening.unsubscribe(channel, listener).then(() => undefined),
      async close(channels) {
        if (owned) listening.destroy();
        else if (channels.length > 0) await listening.unsubscribe([...channels], listener);
      },
    };
  }
}
