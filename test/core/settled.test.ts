import { describe, expect, it } from 'vitest';
import { listen, Pending, settled, settledValue, UNSETTLED, whenSettled } from '../../src/core/settled.js';

describe('settled promises', () => {
  it('carry their value for settledValue and resolve with it', async () => {
    const promise = settled({ n: 1 });
    expect(settledValue(promise)).toEqual({ n: 1 });
    expect(await promise).toEqual({ n: 1 });
    expect(settledValue(settled(false))).toBe(false);
  });

  it('leave any other promise unread, a chained one included', () => {
    expect(settledValue(Promise.resolve(1))).toBe(UNSETTLED);
    expect(settledValue(settled(1).then((n) => n))).toBe(UNSETTLED);
  });

  it('answer whenSettled with the step’s own result, in place', () => {
    expect(whenSettled(settled(2), (n) => n * 3)).toBe(6);
    expect(() => whenSettled(settled(2), () => { throw new Error('step'); })).toThrow('step');
  });
});

describe('pending promises', () => {
  it('run a chain of steps in the call that resolves them, and resolve for any other awaiter too', async () => {
    const pending = new Pending<number>();
    const seen: string[] = [];
    const doubled = whenSettled(pending.promise, (n) => {
      seen.push(`double ${n}`);
      return n * 2;
    });
    expect(doubled).toBeInstanceOf(Promise);
    const plusOne = whenSettled(doubled as Promise<number>, (n) => n + 1);
    let heard: number | undefined;
    listen(plusOne as Promise<number>, (n) => (heard = n), () => undefined);
    expect(settledValue(pending.promise)).toBe(UNSETTLED);
    pending.resolve(5);
    // All in the resolving call: no microtask has run yet.
    expect(seen).toEqual(['double 5']);
    expect(heard).toBe(11);
    expect(settledValue(pending.promise)).toBe(5);
    expect(settledValue(plusOne as Promise<number>)).toBe(11);
    expect(await pending.promise).toBe(5);
    expect(await plusOne).toBe(11);
    pending.resolve(6);
    expect(await pending.promise).toBe(5);
  });

  it('pass a rejection or a step’s throw on to the next step, heard in the same call and never unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const pending = new Pending<number>();
      const failed = whenSettled(pending.promise, () => 1, (error) => {
        throw new Error(`again: ${(error as Error).message}`);
      });
      let heard: unknown;
      listen(failed as Promise<number>, () => undefined, (error) => (heard = error));
      pending.reject(new Error('first'));
      expect((heard as Error).message).toBe('again: first');

      const thrown = new Pending<number>();
      const step = whenSettled(thrown.promise, () => {
        throw new Error('step');
      });
      let heardStep: unknown;
      listen(step, () => undefined, (error) => (heardStep = error));
      thrown.resolve(1);
      expect((heardStep as Error).message).toBe('step');
      await new Promise((resolve) => setTimeout(resolve, 10));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('let a second step wait through then, and a step returning a promise settle the next when it settles', async () => {
    const pending = new Pending<number>();
    const first = whenSettled(pending.promise, (n) => n);
    const second = whenSettled(pending.promise, (n) => n * 10);
    const later = new Pending<number>();
    const chained = whenSettled(first as Promise<number>, () => later.promise);
    pending.resolve(1);
    expect(settledValue(first as Promise<number>)).toBe(1);
    expect(settledValue(second as Promise<number>)).toBe(UNSETTLED);
    expect(settledValue(chained as Promise<number>)).toBe(UNSETTLED);
    later.resolve(7);
    expect(settledValue(chained as Promise<number>)).toBe(7);
    expect(await second).toBe(10);
  });
});
