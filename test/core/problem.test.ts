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
import { DEFAULT_PROBLEM_TYPE_BASE, describeProblem, encodeProblem, isHttpErrorCode, problemDetailsShape, problemFor } from '../../src/core/problem.js';
import { stripeErrorShape } from '../../src/core/stripe-error-shape.js';
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

describe('problem shapes', () => {
  it.each(cases)('gives %s a message member equal to its detail', (error) => {
    expect(problemFor(error).body.message).toBe(error.message);
  });

  it.each(cases)('answers %s through the default shape as problemFor does', (error) => {
    const answer = problemDetailsShape(describeProblem(error));
    const problem = problemFor(error);
    expect([answer.status, answer.headers, answer.body]).toEqual([problem.status, problem.headers, problem.body]);
  });

  it.each(cases)('answers %s in the Stripe shape with its status and Stripe-Should-Retry', (error, status, code, retryAfter) => {
    const answer = stripeErrorShape(describeProblem(error, DEFAULT_PROBLEM_TYPE_BASE, 3));
    expect(answer.status).toBe(status);
    expect(answer.headers).toEqual({ 'content-type': 'application/json', 'stripe-should-retry': String(retryAfter), ...(retryAfter && { 'retry-after': '3' }) });
    const body = answer.body as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ message: error.message, doc_url: `${DEFAULT_PROBLEM_TYPE_BASE}${code}` });
    expect(['api_error', 'idempotency_error', 'invalid_request_error']).toContain(body.error['type']);
    expect(body.error['type'] === 'api_error').toBe(status >= 500);
  });

  it('maps a code of another module by its status, in snake case', () => {
    const answer = stripeErrorShape(describeProblem(new SessionExpiredError('c'), DEFAULT_PROBLEM_TYPE_BASE, 1, { newKeySafe: true }));
    expect(answer.body).toEqual({
      error: { type: 'api_error', code: 'session_expired', message: new SessionExpiredError('c').message, doc_url: `${DEFAULT_PROBLEM_TYPE_BASE}session-expired`, new_key_safe: true },
    });
    expect(answer.headers['stripe-should-retry']).toBe('false');
  });

  it('encodes an answer as JSON with lower-case headers and a default content type', () => {
    const encoded = encodeProblem(() => ({ status: 409, headers: { 'Retry-After': '2' }, body: { a: 1 } }), describeProblem(new LeaseLostError('s', 'k')));
    expect(encoded.headers).toEqual({ 'retry-after': '2', 'content-type': 'application/json' });
    expect(new TextDecoder().decode(encoded.body)).toBe('{"a":1}');
  });

  it.each([
    ['a success status', { status: 200, headers: {}, body: {} }, /status from 400 to 599, got 200/],
    ['a fractional status', { status: 400.5, headers: {}, body: {} }, /status from 400 to 599/],
    ['a header that is not a string', { status: 400, headers: { 'x-n': 1 as unknown as string }, body: {} }, /string header values/],
    ['a body JSON cannot encode', { status: 400, headers: {}, body: undefined }, /JSON body/],
  ])('refuses a shape answering %s', (_name, answer, message) => {
    expect(() => encodeProblem(() => answer, describeProblem(new IdempotencyKeyMissingError()))).toThrow(message);
  });
});
