/**
 * `retrysafe/lambda` invoked in-process with events shaped as AWS's samples (API Gateway REST / payload
 * format 1.0, HTTP API payload format 2.0, function URL), on the DynamoDB store (DynamoDB Local): replays,
 * problems in the event's shape, base64 bodies, multi-value headers, concurrent duplicates, and a timeout
 * mid-handler whose lease ends with the invocation.
 */
import type { APIGatewayProxyEvent, APIGatewayProxyEventV2, APIGatewayProxyResult, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyMissingError, IdempotencyKeyReusedError, RequestInProgressError } from '../../src/core/errors.js';
import { idempotentFunction, idempotentHttpHandler } from '../../src/http/lambda.js';
import { createReceiver } from '../../src/receiver.js';
import { dynamodbLocalForFile, storeOnTableWithoutTtl } from '../support/dynamodb.js';
import { uniqueName } from '../support/services.js';

const PREFIX = uniqueName('rs_lambda');
const local = await dynamodbLocalForFile();

/** AWS's sample REST API (payload format 1.0) event, trimmed to what a proxy integration always sends. */
function restEvent(overrides: Partial<APIGatewayProxyEvent> = {}): APIGatewayProxyEvent {
  return {
    resource: '/payments',
    path: '/payments',
    httpMethod: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': '"k-1"' },
    multiValueHeaders: { 'Content-Type': ['application/json'], 'Idempotency-Key': ['"k-1"'] },
    queryStringParameters: { currency: 'eur' },
    multiValueQueryStringParameters: { currency: ['eur'] },
    pathParameters: null,
    stageVariables: null,
    body: '{"amount":100}',
    isBase64Encoded: false,
    requestContext: { httpMethod: 'POST', path: '/prod/payments', stage: 'prod', requestId: 'r-1' } as APIGatewayProxyEvent['requestContext'],
    ...overrides,
  };
}

/** AWS's sample HTTP API (payload format 2.0) event; `routeKey: '$default'` makes it a function URL's. */
function v2Event(overrides: Partial<APIGatewayProxyEventV2> = {}, routeKey = 'POST /payments'): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey,
    rawPath: '/payments',
    rawQueryString: 'currency=eur',
    headers: { 'content-type': 'application/json', 'idempotency-key': '"k-1"' },
    requestContext: {
      accountId: '123456789012',
      apiId: 'api',
      domainName: 'id.execute-api.us-east-1.amazonaws.com',
      domainPrefix: 'id',
      http: { method: 'POST', path: '/payments', protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: 'agent' },
      requestId: 'r-1',
      routeKey,
      stage: '$default',
      time: '12/Mar/2020:19:03:58 +0000',
      timeEpoch: 1583348638390,
    },
    body: '{"amount":100}',
    isBase64Encoded: false,
    ...overrides,
  };
}

/** A Lambda context whose remaining time is `remainingMs` from when `clock` read `start`. */
function lambdaContext(clock: ManualClock, remainingMs: number): Context {
  const deadline = clock.now() + remainingMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: 'payments',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:us-east-1:123456789012:function:payments',
    memoryLimitInMB: '128',
    awsRequestId: 'req',
    logGroupName: '/aws/lambda/payments',
    logStreamName: 'stream',
    getRemainingTimeInMillis: () => Math.max(0, deadline - clock.now()),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}

/** A handler's I/O: one turn of the event loop. */
const io = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

if (local !== undefined) {
  afterAll(() => local.stop());
  let tables = 0;
  async function receiverOn(options: { leaseMs?: number } = {}) {
    const clock = new ManualClock(Date.now());
    const store = await storeOnTableWithoutTtl(local!, `${PREFIX}_${++tables}`, clock);
    return { clock, store, receiver: createReceiver({ store, clock, ...options }) };
  }

  describe('idempotentHttpHandler', () => {
    it('runs a REST API request once and replays it with Idempotent-Replayed, in payload format 1.0', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const handler = idempotentHttpHandler(async (_event: APIGatewayProxyEvent): Promise<APIGatewayProxyResult> => {
        await io();
        runs++;
        return { statusCode: 201, headers: { 'Content-Type': 'application/json', 'Set-Cookie': 'a=b' }, body: `{"id":${runs}}` };
      }, { receiver });
      const first = await handler(restEvent(), lambdaContext(clock, 3_000));
      expect(first).toEqual({ statusCode: 201, headers: { 'Content-Type': 'application/json', 'Set-Cookie': 'a=b' }, body: '{"id":1}' });
      const replay = await handler(restEvent(), lambdaContext(clock, 3_000));
      expect(replay).toEqual({ statusCode: 201, headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' }, body: '{"id":1}', isBase64Encoded: false });
      expect(runs).toBe(1);
    });

    it('reads the key from multi-value headers in any case, and refuses two keys as malformed (400)', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const handler = idempotentHttpHandler((_event: APIGatewayProxyEvent): Promise<APIGatewayProxyResult> => Promise.resolve({ statusCode: 200, body: String(++runs) }), { receiver });
      const lower = restEvent({ headers: {}, multiValueHeaders: { 'idempotency-KEY': ['"k-2"'] } });
      expect((await handler(lower, lambdaContext(clock, 3_000))).body).toBe('1');
      expect((await handler(restEvent({ headers: { 'IDEMPOTENCY-KEY': '"k-2"' }, multiValueHeaders: {} }), lambdaContext(clock, 3_000))).body).toBe('1');
      const two = await handler(restEvent({ multiValueHeaders: { 'Idempotency-Key': ['"a"', '"b"'] } }), lambdaContext(clock, 3_000));
      expect(two.statusCode).toBe(400);
      expect(two.headers?.['content-type']).toBe('application/problem+json');
      expect(JSON.parse(two.body)).toMatchObject({ status: 400 });
      const none = await handler(restEvent({ headers: {}, multiValueHeaders: {} }), lambdaContext(clock, 3_000));
      expect(none.statusCode).toBe(400);
      expect(runs).toBe(1);
    });

    it('fingerprints a base64 body by its bytes: the same body replays, another one is a 422 in payload format 2.0', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const handler = idempotentHttpHandler((): Promise<APIGatewayProxyStructuredResultV2> => Promise.resolve({ statusCode: 200, body: String(++runs) }), { receiver });
      expect((await handler(v2Event(), lambdaContext(clock, 3_000))).body).toBe('1');
      const encoded = v2Event({ body: Buffer.from('{"amount":100}').toString('base64'), isBase64Encoded: true });
      const replay = await handler(encoded, lambdaContext(clock, 3_000));
      expect(replay).toMatchObject({ statusCode: 200, body: '1', headers: { 'idempotent-replayed': 'true' } });
      const other = await handler(v2Event({ body: Buffer.from('{"amount":999}').toString('base64'), isBase64Encoded: true }), lambdaContext(clock, 3_000));
      expect(other.statusCode).toBe(422);
      expect(JSON.parse(other.body ?? '')).toMatchObject({ status: 422 });
      const query = await handler(v2Event({ rawQueryString: 'currency=usd' }), lambdaContext(clock, 3_000));
      expect(query.statusCode).toBe(422);
      expect(runs).toBe(1);
    });

    it('replays a binary function URL response byte for byte, as base64', async () => {
      const { receiver, clock } = await receiverOn();
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      let runs = 0;
      const handler = idempotentHttpHandler(async (): Promise<APIGatewayProxyStructuredResultV2> => {
        await io();
        runs++;
        return { statusCode: 200, headers: { 'content-type': 'application/octet-stream' }, body: bytes.toString('base64'), isBase64Encoded: true };
      }, { receiver });
      const event = v2Event({}, '$default');
      await handler(event, lambdaContext(clock, 3_000));
      const replay = await handler(event, lambdaContext(clock, 3_000));
      expect(replay.isBase64Encoded).toBe(true);
      expect(Buffer.from(replay.body ?? '', 'base64')).toEqual(bytes);
      expect(runs).toBe(1);
    });

    it('runs once for 10 concurrent duplicate invocations: the others get 409 with Retry-After', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const handler = idempotentHttpHandler(async (): Promise<APIGatewayProxyStructuredResultV2> => {
        runs++;
        await new Promise((resolve) => setTimeout(resolve, 100));
        return { statusCode: 201, body: 'created' };
      }, { receiver });
      const results = await Promise.all(Array.from({ length: 10 }, () => handler(v2Event(), lambdaContext(clock, 3_000))));
      expect(runs).toBe(1);
      expect(results.map((r) => r.statusCode).sort()).toEqual([201, ...Array<number>(9).fill(409)]);
      expect(results.find((r) => r.statusCode === 409)?.headers?.['retry-after']).toBe('1');
    });

    it('ends the lease with the invocation: after a timeout mid-handler, the retry takes the key over at once', async () => {
      const { receiver, clock, store } = await receiverOn({ leaseMs: 60_000 });
      let runs = 0;
      let hung: (() => void) | undefined;
      const handler = idempotentHttpHandler(async (): Promise<APIGatewayProxyStructuredResultV2> => {
        runs++;
        if (runs === 1) await new Promise<void>((resolve) => (hung = resolve));
        return { statusCode: 201, body: `run ${runs}` };
      }, { receiver });
      const first = handler(v2Event(), lambdaContext(clock, 2_000));
      await expect.poll(() => runs).toBe(1);
      expect((await store.get('', 'k-1'))?.leaseExpiresAt).toBe(clock.now() + 2_000);
      // Before the deadline the key is still held.
      expect((await handler(v2Event(), lambdaContext(clock, 2_000))).statusCode).toBe(409);
      // The function timed out (its remaining time ran out); Lambda froze it. The retry runs at once.
      clock.advance(2_000);
      const retry = await handler(v2Event(), lambdaContext(clock, 2_000));
      expect(retry).toEqual({ statusCode: 201, body: 'run 2' });
      expect(runs).toBe(2);
      // The frozen invocation thaws later: its completion is fenced off (lease lost, 409), the retry's stands.
      hung?.();
      expect((await first).statusCode).toBe(409);
      expect((await handler(v2Event(), lambdaContext(clock, 2_000))).body).toBe('run 2');
    });

    it('passes methods it does not act on straight to the handler', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const handler = idempotentHttpHandler((): Promise<APIGatewayProxyResult> => Promise.resolve({ statusCode: 200, body: String(++runs) }), { receiver });
      await handler(restEvent({ httpMethod: 'GET' }), lambdaContext(clock, 3_000));
      await handler(restEvent({ httpMethod: 'GET' }), lambdaContext(clock, 3_000));
      expect(runs).toBe(2);
    });
  });

  describe('idempotentFunction', () => {
    it('runs once per key, replays the result, refuses another payload and a missing key', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const charge = idempotentFunction((event: { orderId?: string; amount: number }) => Promise.resolve({ charged: event.amount, run: ++runs }), {
        receiver,
        key: (event) => event.orderId,
        fingerprint: (event) => event.amount,
      });
      const results = await Promise.allSettled(Array.from({ length: 5 }, () => charge({ orderId: 'o-1', amount: 5 }, lambdaContext(clock, 3_000))));
      const values = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(RequestInProgressError);
      expect(values[0]).toEqual({ charged: 5, run: 1 });
      expect(await charge({ orderId: 'o-1', amount: 5 }, lambdaContext(clock, 3_000))).toEqual({ charged: 5, run: 1 });
      await expect(charge({ orderId: 'o-1', amount: 6 }, lambdaContext(clock, 3_000))).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
      await expect(charge({ amount: 6 }, lambdaContext(clock, 3_000))).rejects.toBeInstanceOf(IdempotencyKeyMissingError);
      expect(runs).toBe(1);
      expect(() => idempotentFunction(() => Promise.resolve(1), { receiver, key: 'orderId' as never })).toThrow(/"key"/);
    });

    it('releases the key when the function throws, so the next invocation runs again', async () => {
      const { receiver, clock } = await receiverOn();
      let runs = 0;
      const flaky = idempotentFunction(async () => {
        await io();
        if (++runs === 1) throw new Error('downstream timeout');
        return 'ok';
      }, { receiver, key: () => 'job-1' });
      await expect(flaky({}, lambdaContext(clock, 3_000))).rejects.toThrow('downstream timeout');
      expect(await flaky({}, lambdaContext(clock, 3_000))).toBe('ok');
      expect(await flaky({}, lambdaContext(clock, 3_000))).toBe('ok');
      expect(runs).toBe(2);
    });
  });
}
