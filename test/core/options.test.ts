import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../src/core/clock.js';
import { requireClock, requireGenerateId, requireOptions } from '../../src/core/options.js';

describe('requireClock', () => {
  it('returns a clock unchanged', () => {
    const clock = new ManualClock(5);
    expect(requireClock(clock)).toBe(clock);
    expect(requireClock(systemClock)).toBe(systemClock);
  });

  it.each([[null], [undefined], [42], ['now'], [{}], [{ now: 1 }], [() => 1]])('throws a TypeError naming "clock" for %s', (value) => {
    expect(() => requireClock(value)).toThrow(TypeError);
    expect(() => requireClock(value)).toThrow(/option "clock" must have a now\(\) method, got /);
  });
});

describe('requireGenerateId', () => {
  it('returns a generator unchanged', () => {
    const generate = (): string => 'id';
    expect(requireGenerateId(generate)).toBe(generate);
  });

  it.each([[null], [undefined], ['id'], [{}]])('throws a TypeError naming "generateId" for %s', (value) => {
    expect(() => requireGenerateId(value)).toThrow(TypeError);
    expect(() => requireGenerateId(value)).toThrow(/option "generateId" must be a function, got /);
  });
});

describe('requireOptions', () => {
  it('accepts any object', () => {
    expect(() => requireOptions('createThing', {})).not.toThrow();
    expect(() => requireOptions('createThing', { a: 1 })).not.toThrow();
  });

  it.each([[null], [undefined], [42], ['options']])('throws a TypeError naming the factory for %s', (value) => {
    expect(() => requireOptions('createThing', value)).toThrow(TypeError);
    expect(() => requireOptions('createThing', value)).toThrow(/^retrysafe: createThing expects an options object, got /);
  });
});
