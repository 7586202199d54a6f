/**
 * Transactional mode with an ORM writing through the request's transaction, as docs/orm.md shows it: an
 * Express route behind the idempotency middleware writes an order through the ORM bound to
 * `idempotencyOf(req, receiver).tx`. The order must commit with the saved response and roll back with the
 * key, and parallel duplicates must write it once. Each ORM × store pair runs these scenarios.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type Receiver } from '../../../src/core/receiver.js';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency, idempotencyOf } from '../../../src/http/express.js';
import type { TransactionalStore } from '../../../src/core/store.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';
import { supertestClient } from '../../http/express-driver.js';
import type { TestClient, TestRequest } from '../../support/http.js';
import { createTestSchema, type TestSchema } from '../../support/postgres-schema.js';

/** One ORM over one store. */
export interface OrmHarness<Tx> {
  readonly store: TransactionalStore<Tx>;
  /** Inserts an order through the ORM bound to `tx`; resolves its id. */
  insertOrder(tx: Tx, key: string, amount: number): Promise<number>;
  /** Committed orders under `key`, read on a connection of their own. */
  committedOrders(key: string): Promise<number>;
  /** Closes what the harness opened (the store included). */
  close(): Promise<void>;
}

/**
 * A migrated PostgreSQL test schema with the scenarios' `orders (id, key, amount)` table, created before the
 * enclosing `describe`'s tests and dropped after them; the getter answers it once created.
 */
export function useOrdersSchema(prefix: string): () => TestSchema {
  let db: TestSchema | undefined;
  beforeAll(async () => {
    db = await createTestSchema(prefix);
    await db.pool.query(`CREATE TABLE "${db.schema}".orders (id serial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)`);
  });
  afterAll(async () => {
    await db?.drop();
  });
  return () => {
    if (db === undefined) throw new Error('the orders schema is created in beforeAll');
    return db;
  };
}

/** A SQLite store on a file of a new temporary directory, with the scenarios' `orders (id, key, amount)` table. */
export function openSqliteOrders(prefix: string): { readonly path: string; readonly store: SqliteStore; readonly remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const path = join(dir, 'orders.db');
  const store = createSqliteStore({ path });
  store.database.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, amount INTEGER NOT NULL)');
  return { path, store, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** What the handler does after its insert: answer 201, throw, or answer 503. */
type Ending = 'created' | 'throw' | 'unavailable';

export function ormScenarios<Tx>(name: string, open: () => Promise<OrmHarness<Tx>>): void {
  describe(name, () => {
    let harness: OrmHarness<Tx>;
    let receiver: Receiver<Tx>;
    let client: TestClient;
    /** Endings of the next handler runs, in order; `created` once they are used up. */
    let endings: Ending[];
    let runs: number;
    /** Requests that reached the app; a handler can wait until a number of them have. */
    let arrived: number;
    let holdUntilArrived: number;

    beforeEach(async () => {
      harness = await open();
      receiver = createReceiver({ store: harness.store, transactional: true, inFlight: 'wait' });
      endings = [];
      runs = 0;
      arrived = 0;
      holdUntilArrived = 0;
      const app = express();
      app.use((_req, _res, next) => {
        arrived++;
        next();
      });
      app.post('/orders', idempotency({ receiver }), async (req: Request, res: Response) => {
        runs++;
        const context = idempotencyOf(req, receiver);
        if (context === undefined) throw new Error('the route requires an Idempotency-Key');
        const id = await harness.insertOrder(context.tx, context.key, Number((req.body as { amount: number }).amount));
        while (arrived < holdUntilArrived) await new Promise((resolve) => setImmediate(resolve));
        const ending = endings.shift() ?? 'created';
        if (ending === 'throw') throw new Error('card declined after the insert');
        if (ending === 'unavailable') {
          res.status(503).json({ error: 'ledger unavailable' });
          return;
        }
        res.status(201).json({ id });
      });
      app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
        res.status(500).json({ error: error.message });
      });
      client = await supertestClient(app);
    });

    afterEach(async () => {
      await client.close();
      await harness.close();
    });

    const order = (key: string): TestRequest => ({
      method: 'POST',
      path: '/orders',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{"amount":250}',
    });

    it('commits the row with the saved response; a retry replays it without a second row', async () => {
      const first = await client.request(order('commit-1'));
      expect(first.status).toBe(201);
      expect(await harness.committedOrders('commit-1')).toBe(1);
      const record = await harness.store.get('', 'commit-1');
      expect(record?.state).toBe('completed');
      expect(Buffer.from(record?.response?.body ?? []).equals(first.body)).toBe(true);

      const retry = await client.request(order('commit-1'));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
      expect(runs).toBe(1);
      expect(await harness.committedOrders('commit-1')).toBe(1);
    });

    it.each<[string, Ending, number]>([
      ['throws', 'throw', 500],
      ['answers 5xx', 'unavailable', 503],
    ])('rolls the row back with the key when the handler %s after its insert; the retry writes exactly one', async (_how, ending, status) => {
      const key = `rollback-${ending}`;
      endings = [ending];
      const failed = await client.request(order(key));
      expect(failed.status).toBe(status);
      expect(await harness.committedOrders(key)).toBe(0);
      expect(await harness.store.get('', key)).toBeUndefined();

      const retry = await client.request(order(key));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBeUndefined();
      expect(runs).toBe(2);
      expect(await harness.committedOrders(key)).toBe(1);
      expect((await harness.store.get('', key))?.state).toBe('completed');
    });

    it('writes one row for parallel duplicates, and every duplicate gets its response', async () => {
      const duplicates = 8;
      // The first handler holds its transaction open until every duplicate has reached the app.
      holdUntilArrived = duplicates;
      const responses = await Promise.all(Array.from({ length: duplicates }, () => client.request(order('parallel-1'))));
      expect(runs).toBe(1);
      expect(await harness.committedOrders('parallel-1')).toBe(1);
      const fresh = responses.filter((response) => response.header('idempotent-replayed') === undefined);
      expect(fresh).toHaveLength(1);
      for (const response of responses) {
        expect(response.status).toBe(201);
        expect(response.body.equals(fresh[0]?.body ?? Buffer.alloc(0))).toBe(true);
      }
    });
  });
}
