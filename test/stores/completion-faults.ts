/**
 * Plain-mode completions through a real fault, shared by the stores' fault tests: `KEYS` requests run at
 * once through the Hono middleware; each handler counts its effect and waits until every claim is written,
 * then the store's fault is injected (a pooler stopped, connections exhausted, memory or disk full, the
 * wire cut) and the handlers answer, so every completion meets the fault.
 *
 * - A fault shorter than `completionRetryMs`: it is lifted once every completion has failed at least once;
 *   every 2xx is then saved (the completion retry), nothing is given up, and a retry of every key is a
 *   replay: no key runs twice. Without the retry each of these keys is answered unsaved.
 * - A fault that outlasts `completionRetryMs`: every 2xx is answered unsaved and counted by
 *   `retrysafe.completions.abandoned` (and logged as `completion_given_up`), the record stays in progress,
 *   and a retry after the lease runs the work again: the remaining window docs/scaling.md states.
 */
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { idempotency } from '../../src/http/hono.js';
import { RECEIVER_INSTRUMENTS as I } from '../../src/index.js';
import { createReceiver } from '../../src/receiver.js';
import { capturingLogger, telemetry } from '../support/telemetry.js';

/** A fault that makes the store's writes fail while it lasts. */
export interface CompletionFault {
  /** Starts the fault; the claims are written already. */
  inject(): Promise<void>;
  /** Ends it. */
  lift(): Promise<void>;
}

/** What a store's test file hands the suite for each test: a store and the fault to inject into it. */
export interface FaultFixture {
  readonly store: IdempotencyStore;
  readonly fault: CompletionFault;
  close(): Promise<void>;
}

const KEYS = 40;
/** Longer than any fault here: the keep-alive's failed renewals never let a lease end during one. */
const LONG_LEASE_MS = 10_000;
/** Large enough that a completion needs new space (Redis memory, SQLite pages). */
const BODY_BYTES = 16_384;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `condition` every 20 ms until it holds; fails naming `what` after 20 s. */
async function until(what: string, condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

/**
 * Runs the suite on `open`'s fixtures. `completions: 'admitted'` is for a fault the store lets completions
 * through (Redis 7's `allow-oom` completion under `noeviction` at the limit): its one test checks that every
 * 2xx is saved while the fault lasts, with no completion refused.
 */
export function completionFaultSuite(name: string, open: () => Promise<FaultFixture>, completions: 'refused' | 'admitted' = 'refused'): void {
  describe(`completions through a fault: ${name}`, () => {
    /**
     * One run of `KEYS` requests: the fault is injected once every handler runs, and lifted once every
     * completion failed once (`liftWhen: 'refused'`) or once every request is answered (`'answered'`).
     */
    async function run(options: { leaseMs: number; completionRetryMs?: number }, liftWhen: 'refused' | 'answered') {
      const fixture = await open();
      const t = telemetry();
      const { logger, lines } = capturingLogger();
      const receiver = createReceiver({ store: fixture.store, logger, meterProvider: t.meterProvider, ...options });
      const scope = randomUUID();
      const effects = new Map<string, number>();
      let started = 0;
      let openGate: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => {
        openGate = resolve;
      });
      const app = new Hono();
      app.use(idempotency({ receiver, scope: () => scope }));
      app.post('/payments/:key', async (c) => {
        const key = c.req.param('key');
        effects.set(key, (effects.get(key) ?? 0) + 1);
        started++;
        await gate;
        return new Response(new Uint8Array(BODY_BYTES).fill(7), { status: 201 });
      });
      const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
      const post = (key: string): Promise<Response> =>
        Promise.resolve(app.request(`/payments/${key}`, { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' }));
      const failedCompletions = (): Promise<number> => t.count(I.storeDuration, { operation: 'complete', error: true });
      const close = async (): Promise<void> => {
        await t.shutdown();
        await fixture.close();
      };
      let lifted = false;
      try {
        const answers = Promise.all(keys.map(post));
        await until('every handler runs (every claim is written)', () => Promise.resolve(started === KEYS));
        await fixture.fault.inject();
        openGate();
        if (liftWhen === 'refused') await until(`all ${KEYS} completions failed once`, async () => (await failedCompletions()) >= KEYS);
        else await answers;
        await fixture.fault.lift();
        lifted = true;
        const statuses = (await answers).map((r) => r.status);
        const answered = keys.filter((_, i) => statuses[i] === 201);
        const records = await Promise.all(answered.map((key) => fixture.store.get(scope, key)));
        return {
          statuses,
          /** Keys answered 2xx without a completed record. */
          unsaved: answered.filter((_, i) => records[i]?.state !== 'completed'),
          records,
          effects,
          failed: await failedCompletions(),
          abandoned: await t.sum(I.abandoned),
          givenUp: lines.filter((line) => line['event'] === 'completion_given_up').length,
          post,
          close,
        };
      } catch (error) {
        openGate();
        if (!lifted) await fixture.fault.lift();
        await close();
        throw error;
      }
    }

    const once = Array.from({ length: KEYS }, () => 1);

    if (completions === 'admitted') it(`saves every answered 2xx while the fault lasts, no completion refused; a retry of each key replays it (${KEYS} keys)`, async () => {
      const outcome = await run({ leaseMs: LONG_LEASE_MS }, 'answered');
      try {
        expect(outcome.statuses).toEqual(outcome.statuses.map(() => 201));
        expect(outcome.failed).toBe(0);
        expect(outcome.unsaved).toEqual([]);
        expect(outcome.abandoned).toBe(0);
        const retries = await Promise.all([...outcome.effects.keys()].map((key) => outcome.post(key)));
        expect(retries.map((r) => [r.status, r.headers.get('idempotent-replayed')])).toEqual(retries.map(() => [201, 'true']));
        expect([...outcome.effects.values()]).toEqual(once);
      } finally {
        await outcome.close();
      }
    });

    if (completions === 'refused') it(`saves every answered 2xx once a fault shorter than completionRetryMs ends; a retry of each key replays it (${KEYS} keys)`, async () => {
      const outcome = await run({ leaseMs: LONG_LEASE_MS }, 'refused');
      try {
        expect(outcome.statuses).toEqual(outcome.statuses.map(() => 201));
        expect(outcome.failed).toBeGreaterThanOrEqual(KEYS);
        expect(outcome.unsaved).toEqual([]);
        expect(outcome.abandoned).toBe(0);
        const retries = await Promise.all([...outcome.effects.keys()].map((key) => outcome.post(key)));
        expect(retries.map((r) => [r.status, r.headers.get('idempotent-replayed')])).toEqual(retries.map(() => [201, 'true']));
        expect([...outcome.effects.values()]).toEqual(once);
      } finally {
        await outcome.close();
      }
    });

    if (completions === 'refused') it('counts every 2xx left unsaved by a fault longer than completionRetryMs; a retry after the lease runs it again, once', async () => {
      const leaseMs = 1_000;
      const outcome = await run({ leaseMs, completionRetryMs: 200 }, 'answered');
      try {
        expect(outcome.statuses).toEqual(outcome.statuses.map(() => 201));
        expect(outcome.unsaved).toHaveLength(KEYS);
        expect(outcome.abandoned).toBe(outcome.unsaved.length);
        expect(outcome.givenUp).toBe(outcome.unsaved.length);
        expect(outcome.records.map((r) => r?.state)).toEqual(outcome.records.map(() => 'in_progress'));
        // Once the lease has ended, a retry takes the key over.
        const leaseEnds = Math.max(...outcome.records.map((r) => r?.leaseExpiresAt ?? 0));
        await sleep(leaseEnds - Date.now() + 100);
        const retries = await Promise.all([...outcome.effects.keys()].map((key) => outcome.post(key)));
        expect(retries.map((r) => [r.status, r.headers.get('idempotent-replayed')])).toEqual(retries.map(() => [201, null]));
        expect([...outcome.effects.values()]).toEqual(once.map(() => 2));
        const replays = await Promise.all([...outcome.effects.keys()].map((key) => outcome.post(key)));
        expect(replays.map((r) => r.headers.get('idempotent-replayed'))).toEqual(replays.map(() => 'true'));
        expect([...outcome.effects.values()]).toEqual(once.map(() => 2));
      } finally {
        await outcome.close();
      }
    });
  });
}
