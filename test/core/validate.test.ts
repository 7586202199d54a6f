import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../src/core/clock.js';
import {
  describe as describeValue,
  invalidOption,
  requireBoolean,
  requireClock,
  requireCount,
  requireDurationMs,
  requireFunction,
  requireGenerateId,
  requireIntegerIn,
  requireLimit,
  requireNonEmptyString,
  requireNonNegativeMs,
  requireObject,
  requireOneOf,
  requireOptions,
} from '../../src/core/validate.js';

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

describe('the value checks', () => {
  it('return a valid value unchanged', () => {
    const fn = (): number => 1;
    expect(requireDurationMs('leaseMs', 5)).toBe(5);
    expect(requireNonNegativeMs('delayMs', 0)).toBe(0);
    expect(requireIntegerIn('prefetch', 3, 1, 10)).toBe(3);
    expect(requireCount('batchSize', 7)).toBe(7);
    expect(requireLimit('reap', 9)).toBe(9);
    expect(requireFunction('onError', fn)).toBe(fn);
    expect(requireBoolean('enabled', false)).toBe(false);
    expect(requireNonEmptyString('groupId', 'g', 5)).toBe('g');
    expect(requireOneOf('inFlight', 'wait', ['reject', 'wait'])).toBe('wait');
    const object = { a: 1 };
    expect(requireObject('headers', object)).toBe(object);
  });

  it.each([
    [() => requireDurationMs('leaseMs', 0), /^retrysafe: option "leaseMs" must be a positive integer number of milliseconds, got 0$/],
    [() => requireDurationMs('leaseMs', 1.5, 'createX'), /^retrysafe: createX option "leaseMs" must be a positive integer number of milliseconds, got 1.5$/],
    [() => requireNonNegativeMs('delayMs', -1), /^retrysafe: option "delayMs" must be a non-negative integer number of milliseconds, got -1$/],
    [() => requireIntegerIn('prefetch', 0, 1, 10), /^retrysafe: option "prefetch" must be an integer from 1 to 10, got 0$/],
    [() => requireIntegerIn('prefetch', 11, 1, 10), /must be an integer from 1 to 10, got 11$/],
    [() => requireCount('batchSize', '3'), /^retrysafe: option "batchSize" must be a positive integer, got "3"$/],
    [() => requireLimit('listRecords', 0), /^retrysafe: listRecords limit must be a positive integer, got 0$/],
    [() => requireFunction('onError', 1), /^retrysafe: option "onError" must be a function, got 1$/],
    [() => requireBoolean('enabled', 'yes'), /^retrysafe: option "enabled" must be a boolean, got "yes"$/],
    [() => requireNonEmptyString('groupId', ''), /^retrysafe: option "groupId" must be a non-empty string, got ""$/],
    [() => requireNonEmptyString('id', 'abcdef', 5), /must be a non-empty string of at most 5 characters, got "abcdef"$/],
    [() => requireOneOf('inFlight', 'later', ['reject', 'wait']), /^retrysafe: option "inFlight" must be "reject" or "wait", got "later"$/],
    [() => requireOneOf('mode', 'x', ['a', 'b', 'c']), /must be "a", "b" or "c", got "x"$/],
    [() => requireObject('headers', []), /^retrysafe: option "headers" must be an object, got \[\]$/],
    [() => requireObject('headers', null), /must be an object, got null$/],
  ])('throw a TypeError naming the option and the value (%#)', (check, message) => {
    expect(check).toThrow(TypeError);
    expect(check).toThrow(message);
  });

  it('builds the one message shape', () => {
    expect(invalidOption('x', 'a string', 1).message).toBe('retrysafe: option "x" must be a string, got 1');
    expect(describeValue(() => 1)).toBe('a function');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(describeValue(cyclic)).toBe('[object Object]');
  });
});
