/**
 * The pipeline failing after the handler ran (`pipeline.handle` rejects once the handler's response is
 * captured), run against every framework driver. Express and NestJS hold the handler's response on the
 * Node `ServerResponse` until the outcome is known; before the fix, the error answer was written into that
 * held response and never left: the client waited until its own timeout. Fastify and Hono answered. Two
 * causes: an observer that throws as the request ends (the response is saved by then; the receiver's own
 * OpenTelemetry observer catches what a span processor throws, so the engine with a bare observer is used),
 * and a `problem` shape that throws on the 409 of a holder fenced off by a takeover. Each request gives up after {@link ANSWER_WITHIN_MS}, so a hang fails fast.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createEngine } from '../../src/core/engine.js';
import { SILENT_OBSERVER, type Observation, type ReceiverObserver } from '../../src/core/observer.js';
import { problemDetailsShape, type ProblemShape } from '../../src/core/problem.js';
import type { ReceiverOptions } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import type { ObservabilityOptions } from '../../src/observability/observer.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { gate, type Driver, type HandlerInput, type HandlerReply, type ScenarioOptions, type TestClient, type TestRequest, type TestResponse } from '../support/http.js';
import { waitUntil } from './scenarios.js';

/** How long a client waits for an answer, in ms: a hang shows as a rejected request, not a test timeout. */
const ANSWER_WITHIN_MS = 5_000;

/** An observer with a bug (it breaks the contract): it throws when the first request ends. */
function throwingOnce(): ReceiverObserver {
  let thrown = false;
  const request: Observation = {
    within: (fn) => fn(),
    workStarted: () => undefined,
    workEnded: () => undefined,
    end: () => {
      if (thrown) return;
      thrown = true;
      throw new Error('observer bug');
    },
  };
  return { ...SILENT_OBSERVER, request: () => request };
}

/** A problem shape with a bug: it has no answer for `idempotency-lease-lost`. */
const throwsOnLeaseLost: ProblemShape = (problem) => {
  if (problem.code === 'idempotency-lease-lost') throw new Error('problem shape bug');
  return problemDetailsShape(problem);
};

const created = (input: HandlerInput): HandlerReply => ({
  status: 201,
  headers: {
    'content-type': 'application/json; charset=utf-8',
    location: '/payments/1',
    'set-cookie': 'session=abc; Path=/',
    'x-request-id': `run-${input.idempotency?.claim.leaseToken ?? 'none'}`,
  },
  body: JSON.stringify({ id: 'pay_1', key: input.idempotency?.key ?? null }),
});

const post = (key: string): TestRequest => ({
  method: 'POST',
  path: '/payments',
  headers: { 'content-type': 'application/json', 'idempotency-key': key },
  body: '{"amount":100}',
  timeoutMs: ANSWER_WITHIN_MS,
});

/**
 * @param held - the adapter holds the Node response (Express, NestJS): its error answer then carries none of
 *   the handler's headers. Fastify's and Hono's error handlers keep some (the handler's Set-Cookie).
 */
export function lateFailureScenarios(driver: Driver, held: boolean): void {
  /** The framework's error answer, carrying nothing of the handler's response where the adapter held it. */
  function expectErrorAnswer(res: TestResponse): void {
    expect(res.status).toBe(500);
    expect(res.header('idempotent-replayed')).toBeUndefined();
    if (!held) return;
    expect(res.cookies).toEqual([]);
    expect(res.header('location')).toBeUndefined();
    expect(res.header('x-request-id')).toBeUndefined();
  }

  describe(`${driver.name}: the pipeline failing after the handler ran`, () => {
    const open: TestClient[] = [];
    afterEach(async () => {
      await Promise.all(open.splice(0).map((client) => client.close()));
    });

    async function start(
      reply: (input: HandlerInput) => Promise<HandlerReply> | HandlerReply,
      receiverOptions: Omit<ReceiverOptions, 'store'> & ObservabilityOptions,
      options: Omit<ScenarioOptions, 'receiver'> = {},
      observer?: ReceiverObserver,
    ): Promise<{ client: TestClient; store: IdempotencyStore; calls: HandlerInput[] }> {
      const store = createMemoryStore(receiverOptions.clock === undefined ? {} : { clock: receiverOptions.clock });
      const receiver = observer === undefined ? createReceiver({ store, ...receiverOptions }) : createEngine({ store, ...receiverOptions }, () => observer);
      const calls: HandlerInput[] = [];
      const client = await driver.start({ receiver, ...options }, async (input) => {
        calls.push(input);
        return reply(input);
      });
      open.push(client);
      return { client, store, calls };
    }

    it("an observer that throws once the response is saved: a 500 without the handler's headers; a retry replays", async () => {
      const { client, store, calls } = await start(created, {}, {}, throwingOnce());
      expectErrorAnswer(await client.request(post('traced')));
      expect((await store.get('', 'traced'))?.state).toBe('completed');
      const retry = await client.request(post('traced'));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(calls).toHaveLength(1);
    });

    it("a problem shape that throws on a fenced-off holder's 409: a 500; the winner's response stands", async () => {
      const clock = new ManualClock(1_000_000);
      const stuck = gate();
      const { client, store, calls } = await start(
        async (input) => {
          if (calls.length === 1) await stuck.promise;
          return created(input);
        },
        { clock, leaseMs: 5_000 },
        { problem: throwsOnLeaseLost },
      );
      const crashed = client.request(post('fenced'));
      await waitUntil(() => calls.length === 1);
      clock.advance(5_001);
      const takeover = await client.request(post('fenced'));
      expect(takeover.status).toBe(201);
      stuck.open();
      expectErrorAnswer(await crashed);
      expect((await store.get('', 'fenced'))?.state).toBe('completed');
      const retry = await client.request(post('fenced'));
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(takeover.body)).toBe(true);
      expect(calls).toHaveLength(2);
    });
  });
}
