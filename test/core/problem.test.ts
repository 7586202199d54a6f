import { describe, expect, it } from 'vitest';
import {
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  IdempotencyKeyReusedError,
  LeaseLostError,
  RequestInProgressError,
  ResponseNotKeptError,
  StoreUnavailableError,
  type IdempotencyError,
} from '../../src/core/errors.js';
import { BodyTooLargeError } from '../../src/http/body.js';
import { SessionExpiredError } from '../../src/sessions/errors.js';
import { DEFAULT_PROBLEM_TYPE_BASE, isHttpErrorCode, problemFor } from '../../src/core/problem.js';
import { IN_PROGRESS_RECORD } from './fixtures/record.js';

const record = IN_PROGRESS_RECORD;

const cases: readonly [IdempotencyError, number, string, boolean][] = [
  [new IdempotencyKeyMissingError(), 400, 'idempotency-key-missing', false],
  [new IdempotencyKeyInvalidError('it is empty'), 400, 'idempotency-key-invalid', false],
  [new IdempotencyKeyReusedError(record), 422, 'idempotency-key-reused', false],
  [new RequestInProgressError(record), 409, 'idempotency-request-in-progress', true],
  [new LeaseLostError('s', 'k'), 409, 'idempotency-lease-lost', true],
  [new StoreUnavailableError(new Error('down')), 503, 'idempotency-store-unavailable', true],
  [new BodyTooLargeError(1_024), 413, 'idempotency-request-too-large', false],
  [new ResponseNotKeptError(201, 5_000), 410, 'idempotency-response-not-kept', false],
];

describe('problemFor', () => {
  it.each(cases)('maps %s to its status, type URI and headers', (error, status, code, retryAfter) => {
    const problem = problemFor(error);
    expect(problem.status).toBe(status);
    expect(problem.body).toMatchObject({ status, code, type: `${DEFAULT_PROBLEM_TYPE_BASE}${code}`, detail: error.message });
    expect(problem.body.title.length).toBeGreaterThan(0);
    expect(problem.headers['content-type']).toBe('application/problem+json');
    expect(problem.headers['retry-after']).toBe(retryAfter ? '1' : undefined);
    expect(Object.keys(problem.headers).sort()).toEqual(retryAfter ? ['content-type', 'retry-after'] : ['content-type']);
  });

  it('uses the given type base and Retry-After seconds', () => {
    const problem = problemFor(new RequestInProgressError(record), 'https://api.example.com/problems/', 5);
    expect(problem.body.type).toBe('https://api.example.com/problems/idempotency-request-in-progress');
    expect(problem.headers['retry-after']).toBe('5');
  });

  it('gives every code a distinct type URI', () => {
    expect(new Set(cases.map(([error]) => problemFor(error).body.type)).size).toBe(cases.length);
  });

  it('keeps the cause of a store failure on the error', () => {
    const cause = new Error('ECONNREFUSED');
    expect(new StoreUnavailableError(cause).cause).toBe(cause);
  });
});

describe('problemFor with a code the HTTP adapters do not own', () => {
  it('answers 500 without Retry-After and keeps the code in the body', () => {
    const problem = problemFor(new SessionExpiredError('c'));
    expect(problem.status).toBe(500);
    expect(problem.headers).toEqual({ 'content-type': 'application/problem+json' });
    expect(problem.body).toMatchObject({ status: 500, code: 'session-expired', type: `${DEFAULT_PROBLEM_TYPE_BASE}session-expired` });
  });

  it('tells the HTTP codes apart', () => {
    expect(cases.every(([error]) => isHttpErrorCode(error.code))).toBe(true);
    expect(isHttpErrorCode('session-expired')).toBe(false);
    expect(isHttpErrorCode('store-url-invalid')).toBe(false);
  });
});
