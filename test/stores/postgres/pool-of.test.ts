/**
 * `poolOf(tx)`: the request's transaction as a one-connection pool for Kysely. The connection stays the
 * store's until COMMIT or ROLLBACK (Kysely's release and destroy do not hand it back early), and an ORM's
 * own BEGIN/COMMIT is refused instead of committing part of the request on its own.
 */
import { Kysely, PostgresDialect, sql, type Generated } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { StoreMisuseError } from '../../../src/core/errors.js';
import { createReceiver } from '../../../src/receiver.js';
import { createPostgresStore, poolOf, type PostgresStore } from '../../../src/stores/postgres/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();
const FP = 'e'.repeat(64);

interface Tables {
  orders: { id: Generated<number>; key: string };
}

describe('poolOf', () => {
  it('refuses anything but a pg client', () => {
    expect(() => poolOf({} as never)).toThrow(TypeError);
    expect(() => poolOf(null as never)).toThrow(TypeError);
  });
});

describe.runIf(available)('poolOf on PostgreSQL', () => {
  let db: TestSchema;
  let store: PostgresStore;
  let keys = 0;

  beforeAll(async () => {
    db = await createTestSchema('rs_poolof', 4);
    await db.pool.query(`CREATE TABLE "${db.schema}".orders (id serial PRIMARY KEY, key text NOT NULL)`);
  });
  afterAll(async () => {
    await db.drop();
  });
  beforeEach(() => {
    store = createPostgresStore({ pool: db.pool, schema: db.schema });
    return () => store.close();
  });

  const nextId = () => ({ scope: 'pool-of', key: `k-${++keys}`, fingerprint: FP });
  const kyselyOver = (tx: Parameters<typeof poolOf>[0]) =>
    new Kysely<Tables>({ dialect: new PostgresDialect({ pool: poolOf(tx) }) }).withSchema(db.schema);
  async function orders(key: string): Promise<number> {
    const result = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".orders WHERE key = $1`, [key]);
    return result.rows[0]?.n ?? -1;
  }

  it("keeps the connection in the store's transaction through Kysely's release and destroy", async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    await receiver.run(id, async ({ tx }) => {
      const orm = kyselyOver(tx);
      await orm.insertInto('orders').values({ key: id.key }).execute();
      // Kysely released its connection after that query and ends its pool here; neither reached pg.
      await orm.destroy();
      const idle = db.pool.idleCount;
      await tx.query(`INSERT INTO "${db.schema}".orders (key) VALUES ($1)`, [id.key]);
      expect(db.pool.idleCount).toBe(idle);
      const status = await tx.query<{ xact: string | null }>('SELECT txid_current_if_assigned()::text AS xact');
      expect(status.rows[0]?.xact).not.toBeNull();
      expect(await orders(id.key)).toBe(0);
      return { ok: true };
    });
    expect(await orders(id.key)).toBe(2);
  });

  it("refuses Kysely's own transaction, so the request rolls back whole", async () => {
    const receiver = createReceiver({ store, transactional: true });
    const id = nextId();
    const run = receiver.run(id, async ({ tx }) => {
      const orm = kyselyOver(tx);
      await orm.insertInto('orders').values({ key: id.key }).execute();
      // Unrefused, its BEGIN would be a warning and its COMMIT would commit the first insert apart from the key.
      await orm.transaction().execute((trx) => trx.insertInto('orders').values({ key: id.key }).execute());
      return { ok: true };
    });
    await expect(run).rejects.toBeInstanceOf(StoreMisuseError);
    expect(await orders(id.key)).toBe(0);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
  });

  it.each(['COMMIT', 'rollback', '  begin', 'START TRANSACTION ISOLATION LEVEL SERIALIZABLE', 'END', 'abort'])(
    'refuses %j and lets savepoints through',
    async (statement) => {
      const receiver = createReceiver({ store, transactional: true });
      const id = nextId();
      await receiver.run(id, async ({ tx }) => {
        const orm = kyselyOver(tx);
        await sql`SAVEPOINT before_order`.execute(orm);
        await orm.insertInto('orders').values({ key: id.key }).execute();
        await sql`ROLLBACK TO SAVEPOINT before_order`.execute(orm);
        await orm.insertInto('orders').values({ key: id.key }).execute();
        await sql`RELEASE SAVEPOINT before_order`.execute(orm);
        await expect(sql.raw(statement).execute(orm)).rejects.toBeInstanceOf(StoreMisuseError);
        return { ok: true };
      });
      expect(await orders(id.key)).toBe(1);
    },
  );
});
