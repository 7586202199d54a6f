// Hot path: docs/hot-path.md#redis-command-framing
/**
 * The store's Buffer-carrying commands on ioredis (the claim's `SET` and the scripts' `EVALSHA`), framed for
 * the wire in one pass: the text between two Buffers written as one string, each Buffer copied once.
 *
 * ioredis frames a command that holds a Buffer piece by piece (`MixedBuffers`): the command line, then per
 * argument a length line, the argument and a line end, each measured with `Buffer.byteLength` and written
 * into the output on its own, about a dozen native calls for a claim. This frames the same bytes with one
 * write per run of text. It is a `Command` of the connection's own ioredis copy with `toWritable`
 * overridden, as ioredis's own `Script` overrides it, sent with the public `sendCommand`: queueing,
 * replies, the offline queue, resends on reconnect, Cluster routing and redirections stay ioredis's.
 *
 * @module
 */
import { createRequire } from 'node:module';
import type { Cluster, Redis } from 'ioredis';
import type { RedisArgument } from './transport.js';

/** What the store needs of ioredis's `Command` class (the instance fields `toWritable` reads). */
interface CommandInstance {
  readonly name: string;
  readonly args: (string | Buffer)[];
  readonly promise: Promise<unknown>;
  toWritable(socket: object): string | Buffer;
}
type CommandClass = new (name: string, args: RedisArgument[], options: { replyEncoding: null; keyPrefix?: string }) => CommandInstance;

/** Sends `name args` with its reply as Buffers (bulk strings) and numbers, as ioredis's `…Buffer` commands do. */
export type FramedSend = (name: string, args: RedisArgument[]) => Promise<unknown>;

/** The ioredis copy retrysafe resolves, with its `Command` subclass; `null` when none resolves. */
interface Framing {
  readonly Redis: abstract new (...args: never[]) => unknown;
  readonly Cluster: abstract new (...args: never[]) => unknown;
  readonly Framed: CommandClass;
}
let framing: Framing | null | undefined;

/**
 * The framed sender for `connection`, or `undefined` when the store keeps ioredis's named commands: a
 * connection with `enableAutoPipelining` (its pipelines are fed by the named commands only), or one that is
 * not a `Redis` or `Cluster` of the ioredis copy this module resolves (a `Command` of another copy may not
 * fit its connection: ioredis 6 calls `setReplyContext` on each, which ioredis 5's lacks).
 */
export function framedSender(connection: Redis | Cluster): FramedSend | undefined {
  if (connection.options.enableAutoPipelining === true) return undefined;
  framing ??= resolveFraming();
  if (framing === null || !(connection instanceof framing.Redis || connection instanceof framing.Cluster)) return undefined;
  const { Framed } = framing;
  const { keyPrefix } = connection.options;
  const options = keyPrefix === undefined ? { replyEncoding: null } : { replyEncoding: null, keyPrefix };
  return (name, args) => {
    const command = new Framed(name, args, options);
    void connection.sendCommand(command as never);
    return command.promise;
  };
}

/** ioredis as resolved from this module, and its `Command` with `toWritable` framing a Buffer-carrying command in one pass. */
function resolveFraming(): Framing | null {
  let ioredis: Omit<Framing, 'Framed'> & { Command: CommandClass };
  try {
    ioredis = createRequire(import.meta.url)('ioredis') as typeof ioredis;
  } catch {
    return null;
  }
  class Framed extends ioredis.Command {
    override toWritable(socket: object): string | Buffer {
      const { args } = this;
      // Without a Buffer, ioredis's own framing is one string already.
      if (!args.some((arg) => Buffer.isBuffer(arg))) return super.toWritable(socket);
      return frame(this.name, args);
    }
  }
  return { Redis: ioredis.Redis, Cluster: ioredis.Cluster, Framed };
}

/**
 * The RESP request for `name args` (arguments as ioredis leaves them: strings and Buffers), byte for byte
 * what ioredis writes.
 */
export function frame(name: string, args: readonly (string | Buffer)[]): Buffer {
  const pieces: (string | Buffer)[] = [];
  let text = `*${args.length + 1}\r\n$${Buffer.byteLength(name)}\r\n${name}\r\n`;
  let length = 0;
  for (const arg of args) {
    if (typeof arg === 'string') {
      text += `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`;
      continue;
    }
    pieces.push(`${text}$${arg.length}\r\n`, arg);
    length += arg.length;
    text = '\r\n';
  }
  pieces.push(text);
  for (let i = 0; i < pieces.length; i += 2) length += Buffer.byteLength(pieces[i] as string);
  const out = Buffer.allocUnsafe(length);
  let at = 0;
  for (const piece of pieces) at += typeof piece === 'string' ? out.write(piece, at) : piece.copy(out, at);
  return out;
}
