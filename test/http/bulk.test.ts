/**
 * Bulk endpoints (`createBulkHandler`) on Express and Fastify: one result per item in a 207 body, the whole
 * response replayed on a retry of the same request, per-item replays when some items change, keys derived
 * from the batch key and the index, and a failed item run again by the retry. Effects counted per item.
 */
import express from 'express';
import Fastify from 'fastify';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createBulkHandler, type BulkRequest, type BulkResponse } from '../../src/http/express.js';
import { createReceiver } from '../../src/receiver.js';

interface Payment {
  readonly idempotencyKey?: string;
  readonly account: string;
  readonly amount: number;
}

/** Sends a bulk request to the app under test. */
type Send = (body: unknown, batchKey?: string) => Promise<{ status: number; headers: Record<string, string>; body: { results: { index: number; key?: string; status: number; body?: unknown; error?: { code: string } }[] } }>;

function expressApp(bulk: (request: BulkRequest) => Promise<BulkResponse>): Send {
  const app = express();
  app.post('/payments/bulk', express.json(), async (req, res) => {
    const answer = await bulk({ batchKey: req.get('idempotency-key'), items: (req.body as { items?: unknown } | undefined)?.items });
    res.status(answer.status).set(answer.headers).json(answer.body);
  });
  return async (body, batchKey) => {
    const call = request(app).post('/payments/bulk').send(body as object);
    const response = await (batchKey === undefined ? call : call.set('idempotency-key', batchKey));
    return { status: response.status, headers: response.headers, body: response.body as Awaited<ReturnType<Send>>['body'] };
  };
}

function fastifyApp(bulk: (request: BulkRequest) => Promise<BulkResponse>): Send {
  const app = Fastify();
  app.post('/payments/bulk', async (req, reply) => {
    const batchKey = req.headers['idempotency-key'];
    const answer = await bulk({ batchKey: typeof batchKey === 'string' ? batchKey : undefined, items: (req.body as { items?: unknown } | undefined)?.items });
    return reply.code(answer.status).headers(answer.headers).send(answer.body);
  });
  return async (body, batchKey) => {
    const response = await app.inject({ method: 'POST', url: '/payments/bulk', payload: body as object, headers: batchKey === undefined ? {} : { 'idempotency-key': batchKey } });
    return { status: response.statusCode, headers: response.headers as Record<string, string>, body: response.json() };
  };
}

for (const [name, appOf] of [['Express', expressApp], ['Fastify', fastifyApp]] as const) {
  describe(`bulk endpoint on ${name}`, () => {
    let charges: Map<string, number>;
    let declined: Set<string>;
    let send: Send;

    beforeEach(() => {
      charges = new Map();
      declined = new Set();
      const receiver = createReceiver({ store: createMemoryStore() });
      send = appOf(
        createBulkHandler({
          receiver,
          scope: 'payments',
          route: 'POST /payments/bulk',
          run: (item) => {
            const payment = item as Payment;
            if (declined.has(payment.account)) return Promise.reject(new Error('card declined'));
            charges.set(payment.account, (charges.get(payment.account) ?? 0) + 1);
            return Promise.resolve({ charged: payment.amount, account: payment.account });
          },
        }),
      );
    });
    afterEach(() => {
      expect([...charges.values()].every((count) => count === 1)).toBe(true);
    });

    const items = (amounts: readonly number[]): Payment[] => amounts.map((amount, i) => ({ idempotencyKey: `pay-${i}`, account: `acct-${i}`, amount }));

    it('answers one result per item and replays the whole response on a retry of the same request', async () => {
      const first = await send({ items: items([10, 20, 30]) });
      expect(first.status).toBe(207);
      expect(first.headers['idempotent-replayed']).toBeUndefined();
      expect(first.body.results).toEqual([
        { index: 0, key: 'pay-0', status: 200, body: { charged: 10, account: 'acct-0' } },
        { index: 1, key: 'pay-1', status: 200, body: { charged: 20, account: 'acct-1' } },
        { index: 2, key: 'pay-2', status: 200, body: { charged: 30, account: 'acct-2' } },
      ]);
      const retry = await send({ items: items([10, 20, 30]) });
      expect(retry.status).toBe(207);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.body).toEqual(first.body);
      expect(charges.size).toBe(3);
    });

    it('replays the unchanged items of a re-sent batch and refuses or runs only the changed ones', async () => {
      await send({ items: items([10, 20]) });
      const changed = [...items([10, 25]), { idempotencyKey: 'pay-2', account: 'acct-2', amount: 5 }];
      const answer = await send({ items: changed });
      expect(answer.body.results.map((r) => r.status)).toEqual([200, 422, 200]);
      expect(answer.body.results[1]?.error?.code).toBe('idempotency-key-reused');
      expect(answer.headers['idempotent-replayed']).toBeUndefined();
      expect(charges.size).toBe(3);
    });

    it('derives one key per item from the batch key and the index', async () => {
      const anonymous = [{ account: 'a', amount: 1 }, { account: 'b', amount: 2 }];
      const first = await send({ items: anonymous }, 'batch-7');
      expect(first.body.results.map((r) => r.key)).toEqual(['batch-7:0', 'batch-7:1']);
      const retry = await send({ items: anonymous }, 'batch-7');
      expect(retry.body).toEqual(first.body);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      const missing = await send({ items: anonymous });
      expect(missing.body.results.map((r) => r.status)).toEqual([400, 400]);
      expect(charges.size).toBe(2);
    });

    it('answers a failed item 500 without saving it, so the retry runs it again', async () => {
      declined.add('acct-1');
      const first = await send({ items: items([10, 20]) });
      expect(first.body.results.map((r) => r.status)).toEqual([200, 500]);
      expect(first.body.results[1]?.error?.code).toBe('bulk-item-failed');
      declined.clear();
      const retry = await send({ items: items([10, 20]) });
      expect(retry.body.results.map((r) => r.status)).toEqual([200, 200]);
      expect(charges.get('acct-1')).toBe(1);
    });

    it('answers 400 when the items are not an array', async () => {
      const answer = await send({ items: 'none' });
      expect(answer.status).toBe(400);
    });
  });
}
