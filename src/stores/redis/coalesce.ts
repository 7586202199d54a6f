// Hot path: docs/hot-path.md#redis-write-coalescing
/**
 * Write coalescing: the commands the store sends during one turn of the event loop leave in one socket
 * write.
 *
 * Under load a server handles many requests per turn of the event loop (each socket that has data is one
 * callback in the poll phase), and each request sends its own script. ioredis writes every command to the
 * socket as it is sent, one system call each, and Redis then reads and wakes once per write. Corking the
 * connection's socket at the first command of a turn and uncorking it in the turn's check phase
 * (`setImmediate`) hands the kernel those commands in one write (Node's `writev`). Nothing is reordered,
 * and nothing waits for I/O: a turn with an immediate pending polls without blocking, so the commands go
 * out before the event loop next waits. Redis answers a batch read in one write too, so the replies
 * arrive together.
 *
 * This is the batching that ioredis's `enableAutoPipelining` also does (it too flushes in `setImmediate`),
 * without its per-batch pipeline object: the commands stay ordinary commands on the connection, with
 * ioredis's own queueing, replies and resend on reconnect. node-redis batches this way by itself (it
 * queues each command and writes the queue, corked, in `setImmediate`), so only ioredis needs it.
 *
 * @module
 */
import type { Socket } from 'node:net';
import type { Cluster, Redis } from 'ioredis';

/**
 * Makes the commands written to `connection` for the rest of this turn of the event loop leave together:
 * corks its socket unless it is corked already, and uncorks it in this turn's check phase. On Redis Cluster
 * the socket of every master is corked so, since ioredis picks the node of each command by its key's slot,
 * each master gets this turn's commands in one write. A socket closed before the uncork is left to ioredis,
 * which resends or fails the commands it had not had answered.
 */
export function coalesceWrites(connection: Redis | Cluster): void {
  if (!connection.isCluster) {
    corkUntilCheck((connection as Redis).stream);
    return;
  }
  for (const node of (connection as Cluster).nodes('master')) corkUntilCheck(node.stream);
}

/** Corks `stream` (absent before ioredis first connects) unless it is corked already, and uncorks it in this turn's check phase. */
function corkUntilCheck(stream: Socket | undefined): void {
  if (stream === undefined || stream.writableCorked > 0) return;
  stream.cork();
  setImmediate(uncork, stream);
}

function uncork(stream: Socket): void {
  stream.uncork();
}
