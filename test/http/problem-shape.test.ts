/**
 * The `problem` option on every adapter: the Stripe-style shape answers each problem the middleware
 * answers, with the problem's status, `Stripe-Should-Retry` and `Retry-After`, and the replay header of a
 * 410 stays the adapter's. Also a shape that answers a success status is refused.
 */
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { createReceiver } from '../../src/receiver.js';
import { stripeErrorShape } from '../../src/core/stripe-error-shape.js';
import type { ProblemShape } from '../../src/core/problem.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { expressDriver } from './express-driver.js';
import { fastifyDriver } from './fastify-driver.js';
import { honoDriver } from './hono-driver.js';
import { nestDriver } from './nestjs-driver.js';
import { gate, type Driver, type HandlerReply, type TestClient, type TestRequest, type TestResponse } from '../support/http.js';

const drivers: readonly Driver[] = [expressDriver('express 5', express), fastifyDriver, honoDriver, nestDriver('express'), nestDriver('fastify')];

const post = (key: string | undefined, body = '{"amount":100}'): TestRequest => ({
  method: 'POST',
  path: '/payments',
  headers: { 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }) },
  body,
});

function stripeError(res: TestResponse): Record<string, unknown> {
  expect(res.header('content-type')).toMatch(/^application\/json/);
  const body = JSON.parse(res.body.toString('utf8')) as { error?: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  return body.error ?? {};
}

describe.each(drivers)('$name: the problem option', (driver) => {
  const open: TestClient[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((client) => client.close()));
  });

  async function start(problem: ProblemShape, reply: () => Promise<HandlerReply> | HandlerReply, maxResponseBytes?: number): Promise<{ client: TestClient; calls: number[] }> {
    const calls: number[] = [];
    const receiver = createReceiver({ store: createMemoryStore() });
    const client = await driver.start({ receiver, problem, ...(maxResponseBytes !== undefined && { maxResponseBytes }) }, async () => {
      calls.push(1);
      return reply();
    });
    open.push(client);
    return { client, calls };
  }

  const charge = (): HandlerReply => ({ status: 200, headers: { 'content-type': 'application/json' }, body: '{"id":"ch_1","amount":100}' });

  it('answers 400, 422 and 409 in the Stripe shape with Stripe-Should-Retry', async () => {
    const held = gate();
    const { client, calls } = await start(stripeErrorShape, async () => {
      await held.promise;
      return charge();
    });
    const missing = await client.request(post(undefined));
    expect(missing.status).toBe(400);
    expect(missing.header('stripe-should-retry')).toBe('false');
    expect(stripeError(missing)).toMatchObject({ type: 'invalid_request_error', code: 'idempotency_key_missing', doc_url: 'https://retrysafe.dev/problems/idempotency-key-missing' });

    const original = client.request(post('k'));
    while (calls.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    const busy = await client.request(post('k'));
    expect([busy.status, busy.header('stripe-should-retry'), busy.header('retry-after')]).toEqual([409, 'true', '1']);
    expect(stripeError(busy)).toMatchObject({ type: 'idempotency_error', code: 'idempotency_key_in_use' });
    expect(typeof stripeError(busy)['message']).toBe('string');
    held.open();
    expect((await original).status).toBe(200);

    const reused = await client.request(post('k', '{"amount":999}'));
    expect([reused.status, reused.header('stripe-should-retry'), reused.header('retry-after')]).toEqual([422, 'false', undefined]);
    expect(stripeError(reused)).toMatchObject({ type: 'idempotency_error', code: 'idempotency_key_reused' });
    expect(calls).toHaveLength(1);
  });

  it('keeps the replay header and Location of a 410 whatever the shape', async () => {
    const { client } = await start(stripeErrorShape, () => ({ status: 201, headers: { 'content-type': 'application/json', location: '/exports/1' }, body: 'x'.repeat(100) }), 10);
    expect((await client.request(post('big'))).status).toBe(201);
    const retry = await client.request(post('big'));
    expect([retry.status, retry.header('idempotent-replayed'), retry.header('location'), retry.header('stripe-should-retry')]).toEqual([410, 'true', '/exports/1', 'false']);
    expect(stripeError(retry)).toMatchObject({ type: 'idempotency_error', code: 'idempotency_response_not_kept', original_status: 201 });
  });

  it('sends a custom shape with its own status and headers, and refuses a shape that answers a success', async () => {
    const custom: ProblemShape = (problem) => ({ status: problem.status === 422 ? 400 : problem.status, headers: { 'X-Problem': problem.code }, body: { failure: problem.code } });
    const { client } = await start(custom, charge);
    await client.request(post('c'));
    const reused = await client.request(post('c', '{"amount":1}'));
    expect([reused.status, reused.header('x-problem'), reused.header('content-type')?.startsWith('application/json')]).toEqual([400, 'idempotency-key-reused', true]);
    expect(JSON.parse(reused.body.toString('utf8'))).toEqual({ failure: 'idempotency-key-reused' });

    const success = await start(() => ({ status: 200, headers: {}, body: {} }), charge);
    const refused = await success.client.request(post(undefined));
    expect(refused.status).toBe(500);
    expect(success.calls).toHaveLength(0);
  });
});
