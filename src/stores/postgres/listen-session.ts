/**
 * Opening the session connection LISTEN needs, and refusing one that goes through a connection pooler.
 *
 * @module
 */
import pg from 'pg';

/**
 * Where a LISTEN connection goes: `undefined` for the pool's own settings, a `pg.ClientConfig` for a
 * connection of its own (straight to PostgreSQL when the pool goes through a pooler), or `false` for none.
 */
export type ListenOption = pg.ClientConfig | false | undefined;

/** Is `value` a valid {@link ListenOption}? */
export function isListenOption(value: unknown): value is ListenOption {
  return value === undefined || value === false || (typeof value === 'object' && value !== null && !Array.isArray(value));
}

/**
 * A new, unconnected client for LISTEN: with `listen`'s settings when given, else the pool's.
 *
 * @param listen - a `pg.ClientConfig`, or `undefined` for the pool's settings (never `false`)
 */
export function listenClient(pool: pg.Pool, listen: pg.ClientConfig | undefined): pg.Client {
  return new pg.Client(listen ?? pool.options);
}

/**
 * Checks that the connected `client` is a session of its own on PostgreSQL, as LISTEN needs. Through
 * PgBouncer in transaction (or statement) mode, LISTEN runs on whichever server connection the pooler
 * lends for that one statement, which goes back to the pool right after: the notifications never reach
 * this client, silently. PgBouncer hands a client a cancel key of its own rather than the server's, so a
 * backend pid (`pg_backend_pid()`) that differs from the one announced at connection (BackendKeyData)
 * gives the pooler away.
 *
 * @param owner - who needs LISTEN, for the message
 * @returns `undefined` for a direct session, else why it cannot LISTEN (a sentence naming the option `listen`)
 * @throws the driver's error when the query fails
 */
export async function poolerProblem(client: pg.Client, owner: string): Promise<string | undefined> {
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const announced = (client as pg.Client & { processID?: number | null }).processID;
  if (rows[0]?.pid === announced) return undefined;
  return (
    `retrysafe: ${owner} needs a session connection for LISTEN, but this one goes through a connection pooler ` +
    `(its backend pid ${String(rows[0]?.pid)} is not the ${String(announced)} it announced), where notifications ` +
    'are never delivered. Give the option "listen" a connection straight to PostgreSQL ' +
    "(e.g. listen: { connectionString: 'postgres://…:5432/…' }), or listen: false to poll instead."
  );
}

/**
 * Connects `client`, checks it is a session of its own ({@link poolerProblem}) and runs `listen` (a
 * `LISTEN …` statement) on it.
 *
 * @throws Error naming the option `listen` when the connection goes through a pooler
 * @throws the driver's error when connecting or LISTEN fails
 */
export async function openListenSession(client: pg.Client, listen: string, owner: string): Promise<void> {
  await client.connect();
  const problem = await poolerProblem(client, owner);
  if (problem !== undefined) throw new Error(problem);
  await client.query(listen);
}
