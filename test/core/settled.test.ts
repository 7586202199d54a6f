import { describe, expect, it } from 'vitest';
import { settled, settledValue, UNSETTLED } from '../../src/core/settled.js';

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
});
