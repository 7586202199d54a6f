/**
 * The side store of large response bodies on PostgreSQL: the table `<schema>.response_bodies` of
 * migration 0014.
 *
 * @module
 */
import pg from 'pg';
import type { ResponseBodyId, ResponseBodyStore } from '../../core/response-bodies.js';
import { requireLimit, requireOptions } from '../../core/validate.js';
import { DEFAULT_SCHEMA, schemaNames } from './schema.js';
import { requirePostgresSource } from './source.js';

/** Options of {@link createPostgresResponseBodies}: exactly one of `pool` and `connectionString`. */
export interface PostgresResponseBodiesOptions {
  /** The pool to run on, left open by `close`. */
  readonly pool?: pg.Pool;
  /** A PostgreSQL URL; the store then owns a pool of its own and ends it on `close`. */
  readonly connectionString?: string;
  /** The schema `migrate()` created the table in. @defaultValue 'retrysafe' */
  readonly schema?: string;
}

/**
 * A {@link ResponseBodyStore} on PostgreSQL, for etcd's `responseStore` option. Each operation is one
 * statement on `<schema>.response_bodies` (run `migrate()` first): `put` an `INSERT … ON CONFLICT DO
 * UPDATE`, committed (and so durable) before it resolves; `deleteExpired` one `DELETE` of at most `limit`
 * rows by the `expires_at` index.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { createPostgresResponseBodies } from 'retrysafe/postgres';
 * import { createEtcdStore } from 'retrysafe/etcd';
 * const store = createEtcdStore({ client, responseStore: createPostgresResponseBodies({ pool }) });
 * ```
 */
export function createPostgresResponseBodies(options: PostgresResponseBodiesOptions): ResponseBodyStore {
  requireOptions('createPostgresResponseBodies', options);
  const source = requirePostgresSource('createPostgresResponseBodies', options.pool, options.connectionString);
  const table = `${schemaNames('schema', options.schema ?? DEFAULT_SCHEMA).quoted}.response_bodies`;
  const pool = 'pool' in source ? source.pool : new pg.Pool({ connectionString: source.connectionString });
  const where = 'scope = $1 AND key = $2 AND fencing_token = $3';
  const ids = (id: ResponseBodyId): string[] => [id.scope, id.key, id.fencingToken];
  return {
    async put(id, body, expiresAt) {
      await pool.query(
        `INSERT INTO ${table} (scope, key, fencing_token, body, expires_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (scope, key, fencing_token) DO UPDATE SET body = EXCLUDED.body, expires_at = EXCLUDED.expires_at`,
        [...ids(id), Buffer.from(body.buffer, body.byteOffset, body.byteLength), expiresAt],
      );
    },
    async get(id) {
      const { rows } = await pool.query<{ body: Buffer }>(`SELECT body FROM ${table} WHERE ${where}`, ids(id));
      return rows[0]?.body;
    },
    async delete(id) {
      return (await pool.query(`DELETE FROM ${table} WHERE ${where}`, ids(id))).rowCount === 1;
    },
    async deleteExpired(now, limit) {
      requireLimit('deleteExpired', limit);
      const result = await pool.query(
        `DELETE FROM ${table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM ${table} WHERE expires_at <= $1 LIMIT $2))`,
        [now, limit],
      );
      return result.rowCount ?? 0;
    },
    async close() {
      if (!('pool' in source)) await pool.end();
    },
  };
}
