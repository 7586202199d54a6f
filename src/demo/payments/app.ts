/**
 * The demo's payments API (Express 5): `POST /payments` writes one charge row, `GET /payments/:id` reads
 * it back. With retrysafe, POST runs behind the idempotency middleware and — in transactional mode —
 * writes its row through the request's transaction, so the row and the saved response commit together.
 *
 * Statuses: 201 + `Location` for a new charge; 200 for GET; as `application/problem+json` (RFC 9457):
 * 400 body not a JSON object (or malformed JSON, or a malformed Idempotency-Key without the middleware),
 * 422 bad `amount` or `currency`, 404 unknown payment, another 4xx a body parser raised (413 …), 500 anything else — plus the middleware's own 400/409/422/503.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import express, { type Express, type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { IdempotencyKeyInvalidError, parseIdempotencyKey, systemClock, type Clock } from '../../index.js';
import { chaos, faultOf, reachCrashPoint, type InjectedFault } from '../harness/chaos.js';
import type { Charge, ChargeLedger } from './ledger.js';

/** Prefix of the problem `type` URIs this API answers with. */
export const PAYMENT_PROBLEM_BASE = 'https://retrysafe.dev/problems/demo/';

/** The JSON a payment is answered with. */
export interface PaymentBody {
  readonly id: string;
  /** Integer minor units (cents). */
  readonly amount: number;
  readonly currency: string;
  readonly status: 'succeeded';
  readonly idempotencyKey: string | null;
  /** ISO 8601 time the charge was written. */
  readonly created: string;
}

/**
 * Options of {@link createPaymentsApp}.
 *
 * @typeParam Tx - the transaction handle the idempotency store hands the handler in transactional mode
 */
export interface PaymentsAppOptions<Tx> {
  readonly ledger: ChargeLedger<Tx>;
  /**
   * The retrysafe middleware guarding POST /payments; `undefined` serves the route bare (the `--unsafe`
   * comparison, where every retry that reaches the handler charges again).
   */
  readonly idempotency: RequestHandler | undefined;
  /**
   * Write the row through `req.idempotency.tx` (a `better-sqlite3` connection or a `pg` `PoolClient` inside
   * the transaction), so it commits with the saved response.
   */
  readonly transactional: boolean;
  /** How long a request marked `slow` takes inside the handler, in milliseconds. */
  readonly slowMs: number;
  /** Told when an injected fault takes effect; see `chaos`. */
  readonly onFault: (injected: InjectedFault) => void;
  /** Payment id generator. @defaultValue `pay_` + a random UUID */
  readonly generateId?: () => string;
  /** Time source of `created`. @defaultValue the system clock */
  readonly clock?: Clock;
}

/**
 * Creates the payments app.
 *
 * @example
 * ```ts
 * const store = createSqliteStore({ path: 'payments.db' });
 * const receiver = createReceiver({ store, transactional: true });
 * const app = createPaymentsApp({
 *   ledger: new SqliteChargeLedger(store.database),
 *   idempotency: idempotency({ receiver }),
 *   transactional: true,
 *   slowMs: 700,
 *   onFault: ({ fault }) => console.log(fault),
 * });
 * ```
 */
export function createPaymentsApp<Tx>(options: PaymentsAppOptions<Tx>): Express {
  const { ledger, transactional, slowMs, onFault } = options;
  const generateId = options.generateId ?? (() => `pay_${randomUUID()}`);
  const clock = options.clock ?? systemClock;
  const app = express();
  app.disable('x-powered-by');

  const guard: RequestHandler[] = options.idempotency ? [options.idempotency] : [];
  // A plain store cannot survive a crash between a handler's write and its record: see ChaosOptions.
  app.post('/payments', chaos({ onFault, drainBeforeCrash: !transactional }), ...guard, express.json(), async (req: Request, res: Response) => {
    const input = parsePayment(req.body);
    if ('problem' in input) {
      sendProblem(res, input.status, input.problem, input.detail);
      return;
    }
    const key = req.idempotency?.key ?? unguardedKey(req);
    if (key instanceof IdempotencyKeyInvalidError) {
      sendProblem(res, 400, 'invalid-idempotency-key', key.message);
      return;
    }
    const charge: Charge = {
      id: generateId(),
      idempotencyKey: key,
      amountCents: input.amount,
      currency: input.currency,
      createdAt: clock.now(),
    };
    await ledger.insert(charge, transactional ? transactionOf<Tx>(req) : undefined);
    const injected = faultOf(res);
    if (injected?.fault === 'slow') {
      onFault(injected);
      await new Promise((resolve) => setTimeout(resolve, slowMs));
    }
    if (injected?.fault === 'crash-mid-handler') {
      reachCrashPoint(res);
      // The process is killed here. With retrysafe in transactional mode the row is not committed yet.
      await new Promise<never>(() => undefined);
    }
    res.status(201).location(`/payments/${charge.id}`).json(toBody(charge));
  });

  app.get('/payments/:id', async (req: Request<{ id: string }>, res: Response) => {
    const charge = await ledger.find(req.params.id);
    if (!charge) {
      sendProblem(res, 404, 'payment-not-found', `No payment with id ${JSON.stringify(req.params.id)}.`);
      return;
    }
    res.json(toBody(charge));
  });

  app.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const status = (error as { status?: unknown }).status;
    if (status === 400) sendProblem(res, 400, 'malformed-json', 'The request body is not valid JSON.');
    else if (typeof status === 'number' && status > 400 && status < 500) sendProblem(res, status, 'bad-request', String((error as Error).message));
    else sendProblem(res, 500, 'internal', 'The payment could not be processed; retry with the same Idempotency-Key.');
  });
  return app;
}

/** The transaction handle the middleware opened for this request (the store's, inside BEGIN). */
function transactionOf<Tx>(req: Request): Tx {
  if (!req.idempotency) throw new Error('retrysafe demo: transactional mode needs the idempotency middleware in front of the handler');
  return req.idempotency.tx as Tx;
}

/** The key of a request served without the middleware (`--unsafe`), parsed as the middleware would. */
function unguardedKey(req: Request): string | null | IdempotencyKeyInvalidError {
  const header = req.get('idempotency-key');
  if (header === undefined) return null;
  try {
    return parseIdempotencyKey(header);
  } catch (error) {
    if (error instanceof IdempotencyKeyInvalidError) return error;
    throw error;
  }
}

type Parsed =
  | { readonly amount: number; readonly currency: string }
  | { readonly status: 400 | 422; readonly problem: string; readonly detail: string };

function parsePayment(body: unknown): Parsed {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { status: 400, problem: 'invalid-body', detail: 'The body must be a JSON object with "amount" and "currency".' };
  }
  const { amount, currency } = body as { amount?: unknown; currency?: unknown };
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) {
    return { status: 422, problem: 'invalid-amount', detail: '"amount" must be a positive integer number of cents.' };
  }
  if (typeof currency !== 'string' || !/^[A-Z]{3}$/.test(currency)) {
    return { status: 422, problem: 'invalid-currency', detail: '"currency" must be a three-letter ISO 4217 code such as "EUR".' };
  }
  return { amount, currency };
}

function toBody(charge: Charge): PaymentBody {
  return {
    id: charge.id,
    amount: charge.amountCents,
    currency: charge.currency,
    status: 'succeeded',
    idempotencyKey: charge.idempotencyKey,
    created: new Date(charge.createdAt).toISOString(),
  };
}

function sendProblem(res: Response, status: number, slug: string, detail: string): void {
  res
    .status(status)
    .type('application/problem+json')
    .send(JSON.stringify({ type: `${PAYMENT_PROBLEM_BASE}${slug}`, title: slug.replace(/-/g, ' '), status, detail }));
}
