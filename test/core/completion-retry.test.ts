/**
 * Plain mode retries a completion that failed with a store error (while the keep-alive holds the lease),
 * so the response is saved and a retry replays it instead of running the work again; after
 * `completionRetryMs` of failures the execution answers unsaved, and says so: the
 * `retrysafe.completions.abandoned` counter and the `completion_given_up` log line. The faults are injected around a real
 * memory store: the first `failures` completions reject as a dropped connection would.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/record.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { keyHash, RECEIVER_INSTRUMENTS as I } from '../../src/index.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { capturingLogger, telemetry } from '../support/telemetry.js';

const FP = 'c'.repeat(64);

/** The memory store, its first `failures` completions rejected after taking effect or before, as asked. */
function flakyCompletions(failures: number, afterEffect: boolean): { store: IdempotencyStore; attempts: () => number } {
  const store = createMemoryStore();
  let attempts = 0;
  return {
    attempts: () => attempts,
    store: {
      claim: (input) => store.claim(input),
      release: (claim) => store.release(claim),
      renew: (claim, leaseMs) => store.renew(claim, leaseMs),
      get: (scope, key) => store.get(scope, key),
      reap: (limit) => store.reap(limit),
      close: () => store.close(),
      async complete(claim, response: StoredResponse, retentionMs) {
        attempts++;
        if (attempts > failures) return store.complete(claim, response, retentionMs);
        // A reply lost after the write committed, or a write that never arrived.
        if (afterEffect) await store.complete(claim, response, retentionMs);
        throw new Error('ECONNRESET (injected)');
      },
    },
  };
}

describe('completion retry (plain mode)', () => {
  it.each([false, true])('saves the response after two failed completions (the first took effect: %s); a retry replays it', async (afterEffect) => {
    const { store, attempts } = flakyCompletions(2, afterEffect);
    const receiver = createReceiver({ store, leaseMs: 1_000 });
    const id = { scope: 'retry', key: randomUUID(), fingerprint: FP };
    let runs = 0;
    const first = await receiver.execute(id, () => {
      runs++;
      return Promise.resolve({ status: 201, headers: {}, body: new Uint8Array([7]) });
    });
    expect(first.saved).toBe(true);
    expect(attempts()).toBe(3);
    const again = await receiver.execute(id, () => {
      runs++;
      return Promise.resolve({ status: 201, headers: {}, body: new Uint8Array([8]) });
    });
    expect(again.replayed).toBe(true);
    expect(Array.from(again.response.body)).toEqual([7]);
    expect(runs).toBe(1);
  });

  it('gives up after completionRetryMs and answers the fresh response unsaved', async () => {
    const { store, attempts } = flakyCompletions(1_000, false);
    const receiver = createReceiver({ store, leaseMs: 1_000, completionRetryMs: 300 });
    const id = { scope: 'retry', key: randomUUID(), fingerprint: FP };
    const execution = await receiver.execute(id, () => Promise.resolve({ status: 201, headers: {}, body: new Uint8Array() }));
    expect(execution).toMatchObject({ replayed: false, saved: false });
    // 50 + 100 ms of backoff fit in 300 ms, 50 + 100 + 200 do not: the first try and two more.
    expect(attempts()).toBe(3);
    expect((await store.get(id.scope, id.key))?.state).toBe('in_progress');
  });

  it('counts and logs a completion it gave up on once, and a completion saved after a retry not at all', async () => {
    const t = telemetry();
    try {
      const { logger, lines } = capturingLogger();
      const { store } = flakyCompletions(1_000, false);
      const receiver = createReceiver({ store, leaseMs: 1_000, completionRetryMs: 100, logger, meterProvider: t.meterProvider });
      const id = { scope: 'retry', key: randomUUID(), fingerprint: FP };
      const execution = await receiver.execute(id, () => Promise.resolve({ status: 201, headers: {}, body: new Uint8Array() }));
      expect(execution.saved).toBe(false);
      const saving = createReceiver({ store: flakyCompletions(1, false).store, leaseMs: 1_000, logger, meterProvider: t.meterProvider });
      const saved = await saving.execute({ ...id, key: randomUUID() }, () => Promise.resolve({ status: 201, headers: {}, body: new Uint8Array() }));
      expect(saved.saved).toBe(true);
      expect(await t.sum(I.abandoned, { store: 'custom' })).toBe(1);
      expect(lines.map((l) => [l['event'], l['level'], l['keyHash']])).toEqual([['completion_given_up', 50, keyHash(id.scope, id.key)]]);
    } finally {
      await t.shutdown();
    }
  });

  it('rejects a negative completionRetryMs with a TypeError naming the option', () => {
    expect(() => createReceiver({ store: createMemoryStore(), completionRetryMs: -1 })).toThrow(/completionRetryMs/);
  });
});
