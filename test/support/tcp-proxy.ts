/**
 * A TCP proxy on 127.0.0.1 in front of a real server, for the faults a test injects on the wire:
 * - `cut()` closes the listener and destroys every open connection (the client sees the server vanish),
 *   `restore()` listens again on the same port;
 * - `arm(matches)` loses one reply: the first client→server chunk matching it is forwarded, and when the
 *   server's answer comes back the connection is dropped instead of delivering it. The request did reach
 *   the server (and, for an autocommit statement or a script, took effect): the client sees an
 *   indeterminate failure.
 */
import { once } from 'node:events';
import * as net from 'node:net';

export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  private armed: ((chunk: Buffer) => boolean) | undefined;
  /** How many replies were dropped. */
  dropped = 0;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      this.sockets.add(client).add(upstream);
      let doomed = false;
      const drop = (): void => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      for (const socket of [client, upstream]) {
        socket.on('error', drop);
        socket.on('close', drop);
      }
      client.on('data', (chunk: Buffer) => {
        if (this.armed?.(chunk) === true) {
          this.armed = undefined;
          doomed = true;
        }
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        if (doomed) {
          if (!client.destroyed) this.dropped++;
          drop();
          return;
        }
        client.write(chunk);
      });
    });
    server.listen(this.port, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    this.port = address.port;
    this.server = server;
  }

  /** Drops the reply to the next request whose bytes satisfy `matches`. */
  arm(matches: (chunk: Buffer) => boolean): void {
    this.armed = matches;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  restore(): Promise<void> {
    return this.start();
  }

  /** Stops the proxy for good (what `cut` does). */
  close(): Promise<void> {
    return this.cut();
  }
}
