/**
 * The orders scenario's HTTP API (Express 5): `POST /orders` writes the order row and its `order.placed`
 * outbox row through the request's transaction, behind retrysafe's middleware in PostgreSQL transactional
 * mode, so the order, the event and the saved response commit together or not at all. The demo's chaos
 * middleware in front injects lost replies and slow handlers.
 *
 * Statuses: 201 with the order as JSON; 422 (`application/problem+json`) for a bad amount or currency;
 * the middleware's own 400/409/422/503.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import express, { type Express, type Request, type Response } from 'express';
import type pg from 'pg';
import { idempotency } from '../../http/express.js';
import { createReceiver } from '../../index.js';
import type { Outbox } from '../../messaging/outbox/index.js';
import type { PostgresStore } from '../../postgres.js';
import { chaos, faultOf, type InjectedFault } from '../harness/chaos.js';
import { ORDER_PLACED } from './transport.js';

/** The event's payload. */
export interface OrderPlaced {
  readonly orderId: string;
  /** Integer minor units (cents). */
  readonly amountCents: number;
  readonly currency: string;
}

/** Options of {@link createOrdersApp}. */
interface OrdersAppOptions {
  /** The idempotency store on the run's schema; its transactions carry the order and outbox writes. */
  readonly store: PostgresStore;
  /** The outbox on the same schema. */
  readonly outbox: Outbox;
  /** The run's schema (holds the `orders` table). */
  readonly schema: string;
  /** The idempotency lease, in milliseconds. */
  readonly leaseMs: number;
  /** How long a request marked `slow` takes inside the handler, in milliseconds. */
  readonly slowMs: number;
  /** Told when an injected fault takes effect. */
  readonly onFault: (injected: InjectedFault) => void;
}

/**
 * Creates the order API.
 *
 * @example
 * ```ts
 * const app = createOrdersApp({ store, outbox, schema, leaseMs: 3_000, slowMs: 700, onFault: console.log });
 * ```
 */
export function createOrdersApp(options: OrdersAppOptions): Express {
  const { store, outbox, schema, slowMs, onFault } = options;
  const receiver = createReceiver({ store, transactional: true, leaseMs: options.leaseMs });
  const app = express();
  app.disable('x-powered-by');
  app.post('/orders', chaos({ onFault }), idempotency({ receiver }), express.json(), async (req: Request, res: Response) => {
    const { amount, currency } = (req.body ?? {}) as { amount?: unknown; currency?: unknown };
    if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || typeof currency !== 'string' || !/^[A-Z]{3}$/.test(currency)) {
      res.status(422).type('application/problem+json').send(JSON.stringify({ title: 'invalid order', status: 422, detail: 'Send a positive integer "amount" in cents and a three-letter "currency".' }));
      return;
    }
    const context = req.idempotency;
    if (context === undefined) throw new Error('retrysafe demo: POST /orders needs the idempotency middleware');
    const tx = context.tx as pg.PoolClient;
    const order: OrderPlaced = { orderId: `ord_${randomUUID()}`, amountCents: amount, currency };
    // $1 id, $2 idempotency key, $3 amount in cents, $4 currency, $5 created at (ms since the epoch)
    await tx.query(`INSERT INTO "${schema}".orders (id, idempotency_key, amount_cents, currency, created_at) VALUES ($1, $2, $3, $4, $5)`, [
      order.orderId,
      context.key,
      amount,
      currency,
      Date.now(),
    ]);
    await outbox.enqueue(tx, { topic: ORDER_PLACED, key: order.orderId, payload: JSON.stringify(order) });
    const injected = faultOf(res);
    if (injected?.fault === 'slow') {
      onFault(injected);
      await new Promise((resolve) => setTimeout(resolve, slowMs));
    }
    res.status(201).location(`/orders/${order.orderId}`).json(order);
  });
  return app;
}
