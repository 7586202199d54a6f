import { describe, expect, it } from 'vitest';
import * as storeUrl from '../../src/store-url.js';
import * as clientOutcome from '../../src/client/outcome.js';
import * as sessionErrors from '../../src/sessions/errors.js';
import * as coreErrors from '../../src/core/errors.js';
import { IdempotencyError } from '../../src/core/errors.js';
import * as inboxErrors from '../../src/messaging/inbox/errors.js';
import * as outboxErrors from '../../src/messaging/outbox/errors.js';
import { IN_PROGRESS_RECORD } from './fixtures/record.js';

const record = IN_PROGRESS_RECORD;
const cause = new Error('boom');

/** One instance of every error class the modules below export; the test fails when a class is missing here. */
const instances: readonly Error[] = [
  new coreErrors.IdempotencyError('idempotency-key-missing', 'root'),
  new coreErrors.ModuleError('module-code', 'root'),
  new coreErrors.IdempotencyKeyMissingError(),
  new coreErrors.IdempotencyKeyInvalidError('it is empty'),
  new coreErrors.IdempotencyKeyReusedError(record),
  new coreErrors.RequestInProgressError(record),
  new coreErrors.ResponseNotKeptError(201, 5_000),
  new coreErrors.StoreUnavailableError(cause),
  new coreErrors.LeaseLostError('s', 'k'),
  new coreErrors.RecoveryPointUnresumableError('s', 'k', 'plan', 'cannot resume'),
  new coreErrors.TerminalPhaseError('card declined', { details: { decline: 'insufficient_funds' } }),
  new coreErrors.CompensationFailedError('s', 'k', 'charged', cause),
  new coreErrors.StoreClosedError('SQLite'),
  new coreErrors.StoreMisuseError('used after the transaction ended'),
  new coreErrors.TransactionAbortedError('rolled back at COMMIT'),
  new coreErrors.SchemaTooNewError('schema "retrysafe"', 12, 11),
  new inboxErrors.InboxError('inbox-handler-timeout', 'root'),
  new inboxErrors.MessageIdMissingError('it is empty'),
  new inboxErrors.HandlerTimeoutError(5),
  new outboxErrors.OutboxError('outbox-publish-failed', 'root'),
  new outboxErrors.PublishError('refused', true, { cause }),
  new outboxErrors.PublishTimeoutError(5),
  new sessionErrors.SessionError('session-unknown', 'c', 'root'),
  new sessionErrors.SessionUnknownError('c'),
  new sessionErrors.SessionExpiredError('c'),
  new sessionErrors.StaleRequestError('c', 1, 2),
  new sessionErrors.SessionRequestInvalidError('c', 'bad'),
  new sessionErrors.SessionRequestInProgressError('c', 1),
  new sessionErrors.SessionLeaseLostError('c', 1),
  new clientOutcome.RetryExhaustedError('retry-attempts-exhausted', [{ attempt: 1, key: 'k', error: cause, replayed: false, delayMs: 0 }], undefined),
  new storeUrl.StoreUrlError('nope:', 'unknown scheme'),
  new storeUrl.StoreOpenError('cannot reach the store at redis://127.0.0.1:1: ECONNREFUSED', { cause }),
];

const exportedErrorClasses = [coreErrors, inboxErrors, outboxErrors, sessionErrors, clientOutcome, storeUrl].flatMap((module) =>
  Object.entries(module).filter(
    (entry): entry is [string, new (...args: never[]) => Error] => {
      const value: unknown = entry[1];
      return typeof value === 'function' && (value.prototype as unknown) instanceof Error;
    },
  ),
);

describe('error classes', () => {
  it('finds the exported error classes', () => {
    expect(exportedErrorClasses.map(([name]) => name).sort()).toEqual(instances.map((error) => error.constructor.name).sort());
  });

  it.each(exportedErrorClasses)('%s extends IdempotencyError', (_name, errorClass) => {
    expect(errorClass === IdempotencyError || errorClass.prototype instanceof IdempotencyError).toBe(true);
  });

  it.each(instances.map((error) => [error.constructor.name, error] as const))(
    '%s is an IdempotencyError with its class name and a non-empty code',
    (className, error) => {
      expect(error).toBeInstanceOf(IdempotencyError);
      expect(error.name).toBe(className);
      expect(typeof (error as IdempotencyError).code).toBe('string');
      expect((error as IdempotencyError).code.length).toBeGreaterThan(0);
    },
  );

  it('keeps the module codes and the wrapped cause', () => {
    expect(new sessionErrors.SessionExpiredError('c').code).toBe('session-expired');
    expect(new sessionErrors.SessionExpiredError('c').clientId).toBe('c');
    expect(new inboxErrors.HandlerTimeoutError(5).code).toBe('inbox-handler-timeout');
    expect(new outboxErrors.PublishTimeoutError(5).code).toBe('outbox-publish-timeout');
    expect(new storeUrl.StoreUrlError('x', 'y').code).toBe('store-url-invalid');
    expect(new storeUrl.StoreOpenError('refused', { cause }).code).toBe('store-open-failed');
    expect(new storeUrl.StoreOpenError('refused', { cause }).cause).toBe(cause);
    expect(new outboxErrors.PublishError('refused', false, { cause }).cause).toBe(cause);
    const exhausted = new clientOutcome.RetryExhaustedError('retry-deadline-exceeded', [{ attempt: 1, key: undefined, error: cause, replayed: false, delayMs: 0 }], undefined);
    expect(exhausted.code).toBe('retry-deadline-exceeded');
    expect(exhausted.cause).toBe(cause);
    expect(new coreErrors.TerminalPhaseError('declined', { details: 7 })).toMatchObject({ code: 'phase-failed-terminally', details: 7 });
    expect(new coreErrors.CompensationFailedError('s', 'k', 'charged', cause)).toMatchObject({ code: 'saga-compensation-failed', phase: 'charged', cause });
  });
});
