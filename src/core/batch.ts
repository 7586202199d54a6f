/**
 * Batches with a result per item (`Receiver.runBatch`): every item is its own operation (scope, key,
 * fingerprint), the whole batch is claimed at once (`claimAll`: the store's `claimMany`, else one claim per
 * item), the won items run with bounded concurrency, and the answer is one outcome per item, in input order.
 * A retry of the batch replays what was done and runs only what was not.
 *
 * Sources: Stripe's idempotent requests (one key per operation, the saved result replayed); IETF
 * draft-ietf-httpapi-idempotency-key-header, section 2.7 (a reused key is refused, a request in flight is
 * not run twice).
 *
 * @module
 */
import { claimAll, mapBounded } from './batch-claim.js';
import { DeadlineReached, withDeadline } from './attempt-end.js';
import type { KeepAlive } from './keep-alive.js';
import { IdempotencyError, IdempotencyKeyReusedError, LeaseLostError, RequestInProgressError, StoreUnavailableError } from './errors.js';
import type { ExecutionContext, OperationId, Receiver } from './receiver.js';
import type { Claim, IdempotencyRecord, StoredResponse } from './record.js';
import { answerStanding } from './standing.js';
import { claimInputOf, type ClaimResult, type TransactionalStore, type TransactionView } from './store.js';
import { requireBoolean, requireFunction, requireIntegerIn } from './validate.js';

/** One item of a batch: its own operation (scope, key, fingerprint) and the input handed to the work. */
export interface BatchItem<I> extends OperationId {
  readonly input: I;
}

/** What the work of one item is handed: the execution context of its claim and its place in the batch. */
export interface BatchContext<Tx> extends ExecutionContext<Tx> {
  /** The item's index in the batch as given. */
  readonly index: number;
}

/** Options of {@link Receiver.runBatch}. */
export interface BatchOptions {
  /** How many items' work runs at once (a positive integer, at most 1,000). @defaultValue 8 */
  readonly concurrency?: number;
  /**
   * Transactional mode only: every won item's work and completion run in ONE transaction, one item after
   * another, so the batch's new items commit together or not at all; when one fails, every won item is
   * `failed` (the others with {@link BatchRolledBackError}) and released. @defaultValue false: each item
   * commits with its own completion
   */
  readonly atomic?: boolean;
}

/** Where an outcome belongs: the item's index, scope and key. */
interface OutcomeOf {
  readonly index: number;
  readonly scope: string;
  readonly key: string;
}

/**
 * One item's outcome. `executed`: the work ran now and its result was saved (`saved: false` when the store
 * failed to save it for `completionRetryMs`: the key then stays claimed until its lease expires). `replayed`: the result saved by an
 * earlier run (or by the same key earlier in this batch). `in_flight`: another caller holds the key.
 * `mismatch`: the key was used with another fingerprint (HTTP 422). `failed`: the work threw (the key was
 * released, so a retry runs it again), the lease was lost, plain mode's work ran past `maxExecutionMs` (a
 * {@link LeaseLostError} with reason `deadline`; the key is left to its lease's end, as the work may still be
 * under way), or the store was unavailable. Values are JSON
 * round-tripped, as `Receiver.run` answers them.
 */
export type BatchOutcome<T> = OutcomeOf &
  (
    | { readonly status: 'executed'; readonly value: T; readonly saved: boolean }
    | { readonly status: 'replayed'; readonly value: T }
    | { readonly status: 'in_flight'; readonly error: RequestInProgressError }
    | { readonly status: 'mismatch'; readonly error: IdempotencyKeyReusedError }
    | { readonly status: 'failed'; readonly error: unknown }
  );

/** The status of a {@link BatchOutcome}. */
export type BatchStatus = BatchOutcome<unknown>['status'];

/** An item of an `atomic` batch whose own work succeeded, rolled back because another item's failed. */
export class BatchRolledBackError extends IdempotencyError {
  override readonly name = 'BatchRolledBackError';
  constructor(cause: unknown) {
    super('batch-rolled-back', 'Another item of this atomic batch failed; the whole batch was rolled back.', { cause });
  }
}

/** What the batch needs of the engine: the receiver, whether it runs in transactional mode, and plain mode's lease keeping. */
interface BatchEngine<Tx> {
  readonly receiver: Receiver<Tx>;
  readonly transactional: boolean;
  /** Renews the won items' leases from their claim until their completion or release (both modes). */
  readonly keepAlive: KeepAlive;
  /** Plain mode: tries a failed completion again, as `execute` does; whether it took effect, or `undefined` when it gave up. */
  retryCompletion(claim: Claim, response: StoredResponse): Promise<boolean | undefined>;
}

/** One won item: its index in the batch, the claim, and (once run) the response to save. */
interface Won {
  readonly index: number;
  readonly claim: Claim;
}

const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' });
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Runs the batch: see {@link Receiver.runBatch}.
 *
 * @throws TypeError when `fn` is not a function, an option is invalid, or `atomic` is asked of a receiver
 *   not in transactional mode
 */
export async function runBatch<Tx, I, T>(
  engine: BatchEngine<Tx>,
  items: readonly BatchItem<I>[],
  fn: (input: I, context: BatchContext<Tx>) => Promise<T>,
  options: BatchOptions = {},
): Promise<BatchOutcome<T>[]> {
  requireFunction('fn', fn, 'runBatch');
  const concurrency = requireIntegerIn('concurrency', options.concurrency ?? 8, 1, 1_000, 'runBatch');
  const atomic = requireBoolean('atomic', options.atomic ?? false, 'runBatch');
  if (atomic && !engine.transactional) throw new TypeError('retrysafe: runBatch option "atomic" needs a receiver in transactional mode');
  const { receiver } = engine;
  const firsts = firstOccurrences(items);
  const primaries = [...new Set(firsts)];
  const outcomes = new Array<BatchOutcome<T> | undefined>(items.length);
  let claims: ClaimResult[];
  try {
    const inputs = primaries.map((index) => claimInputOf(items[index] as BatchItem<I>, receiver.options, receiver.options.generateId()));
    claims = await claimAll(receiver.store, inputs, concurrency);
  } catch (error) {
    const failure = new StoreUnavailableError(error);
    return items.map((item, index) => ({ index, scope: item.scope, key: item.key, status: 'failed', error: failure }));
  }
  const won: Won[] = [];
  primaries.forEach((index, at) => {
    const result = claims[at] as ClaimResult;
    if (result.acquired) won.push({ index, claim: result.claim });
    else outcomes[index] = standing<T>(index, items[index] as BatchItem<I>, result.record);
  });
  const { maxExecutionMs } = engine.receiver.options;
  const start = (one: Won): Promise<StoredResponse> => fn((items[one.index] as BatchItem<I>).input, { claim: one.claim, tx: undefined as Tx, index: one.index }).then(responseOf);
  const work = maxExecutionMs === undefined ? start : (one: Won) => withDeadline(() => start(one), maxExecutionMs);
  // Leases are kept alive by fenced renewals apart from any transaction the work runs in. Plain mode and an
  // atomic batch hold every won item's lease from its claim on; a transactional item holds its own from the
  // start of its transaction, so a large batch does not renew every waiting item while the pool is busy
  // with the running ones (an item taken over while it waited has its completion refused and rolls back).
  const hold = (one: Won): void => engine.keepAlive.hold(one.claim);
  const drop = (one: Won) => () => engine.keepAlive.drop(one.claim);
  if (atomic) {
    won.forEach(hold);
    await runAtomic(engine, items, fn, won, outcomes).finally(() => won.forEach((one) => drop(one)()));
  } else if (engine.transactional) {
    await mapBounded(won, concurrency, async (one) => {
      hold(one);
      outcomes[one.index] = await runInTransaction(engine, items, fn, one).finally(drop(one));
    });
  } else {
    won.forEach(hold);
    await mapBounded(won, concurrency, async (one) => (outcomes[one.index] = await runPlain<Tx, T>(engine, work, one).finally(drop(one))));
  }
  return items.map((item, index) => outcomes[index] ?? duplicateOf(item, index, outcomes[firsts[index] as number] as BatchOutcome<T>, items[firsts[index] as number] as BatchItem<I>));
}

/** For each item, the index of the first item of the batch with the same (scope, key). */
function firstOccurrences(items: readonly OperationId[]): number[] {
  const seen = new Map<string, number>();
  return items.map((item, index) => {
    const id = `${item.scope.length}:${item.scope}\u0000${item.key}`;
    const first = seen.get(id);
    if (first !== undefined) return first;
    seen.set(id, index);
    return index;
  });
}

/** The outcome of an item whose claim found `record` standing in the way. */
function standing<T>(index: number, item: OperationId, record: IdempotencyRecord): BatchOutcome<T> {
  const at = { index, scope: item.scope, key: item.key };
  let response: StoredResponse | undefined;
  try {
    response = answerStanding(record, item);
  } catch (error) {
    return { ...at, status: 'mismatch', error: error as IdempotencyKeyReusedError };
  }
  if (response === undefined) return { ...at, status: 'in_flight', error: new RequestInProgressError(record) };
  return { ...at, status: 'replayed', value: valueOf<T>(response) };
}

/**
 * The outcome of a later item with the key of an earlier one (`first`): refused when its fingerprint
 * differs, else the first one's outcome, an execution answered as a replay.
 */
function duplicateOf<T>(item: OperationId, index: number, first: BatchOutcome<T>, firstItem: OperationId): BatchOutcome<T> {
  const at = { index, scope: item.scope, key: item.key };
  if (item.fingerprint !== firstItem.fingerprint) {
    const claimed: IdempotencyRecord = { ...firstItem, state: 'in_progress', leaseToken: '', leaseExpiresAt: 0, createdAt: 0, expiresAt: 0 };
    return { ...at, status: 'mismatch', error: new IdempotencyKeyReusedError(claimed) };
  }
  if (first.status === 'executed') return { ...at, status: 'replayed', value: first.value };
  return { ...first, ...at };
}

/**
 * Plain mode: the item's work, then its completion, tried again for `completionRetryMs` when it fails (or
 * its release when the work threw or its response is not to be kept).
 */
async function runPlain<Tx, T>(engine: BatchEngine<Tx>, work: (one: Won) => Promise<StoredResponse>, one: Won): Promise<BatchOutcome<T>> {
  const { store, options } = engine.receiver;
  const at = { index: one.index, scope: one.claim.scope, key: one.claim.key };
  let response: StoredResponse;
  try {
    response = await work(one);
  } catch (error) {
    // Past its deadline the work may still be under way: the key is left to its lease's end, not released.
    if (error instanceof DeadlineReached) return { ...at, status: 'failed', error: new LeaseLostError(one.claim.scope, one.claim.key, 'deadline') };
    await store.release(one.claim).catch(() => false);
    return { ...at, status: 'failed', error };
  }
  let saved: boolean | undefined;
  try {
    saved = await store.complete(one.claim, response, options.retentionMs);
  } catch {
    saved = await engine.retryCompletion(one.claim, response);
    // The effect happened; answer it. The key stays claimed until its lease expires.
    if (saved === undefined) return { ...at, status: 'executed', value: valueOf<T>(response), saved: false };
  }
  if (!saved) return { ...at, status: 'failed', error: new LeaseLostError(one.claim.scope, one.claim.key) };
  return { ...at, status: 'executed', value: valueOf<T>(response), saved: true };
}

/** Transactional mode: the item's work and its completion in one transaction of its own. */
async function runInTransaction<Tx, I, T>(
  engine: BatchEngine<Tx>,
  items: readonly BatchItem<I>[],
  fn: (input: I, context: BatchContext<Tx>) => Promise<T>,
  one: Won,
): Promise<BatchOutcome<T>> {
  const store = engine.receiver.store as TransactionalStore<Tx>;
  const at = { index: one.index, scope: one.claim.scope, key: one.claim.key };
  try {
    const response = await store.transaction((tx, view) => runOne(engine, items, fn, one, tx, view));
    return { ...at, status: 'executed', value: valueOf<T>(response), saved: true };
  } catch (error) {
    await store.release(one.claim).catch(() => false);
    return { ...at, status: 'failed', error };
  }
}

/** An `atomic` batch: every won item's work and completion in one transaction, one after another. */
async function runAtomic<Tx, I, T>(
  engine: BatchEngine<Tx>,
  items: readonly BatchItem<I>[],
  fn: (input: I, context: BatchContext<Tx>) => Promise<T>,
  won: readonly Won[],
  outcomes: (BatchOutcome<T> | undefined)[],
): Promise<void> {
  if (won.length === 0) return;
  const store = engine.receiver.store as TransactionalStore<Tx>;
  let failed: { readonly index: number; readonly error: unknown } | undefined;
  try {
    const responses = await store.transaction(async (tx, view) => {
      const done: StoredResponse[] = [];
      for (const one of won) {
        try {
          done.push(await runOne(engine, items, fn, one, tx, view));
        } catch (error) {
          failed = { index: one.index, error };
          throw error;
        }
      }
      return done;
    });
    won.forEach((one, at) => {
      outcomes[one.index] = { index: one.index, scope: one.claim.scope, key: one.claim.key, status: 'executed', value: valueOf<T>(responses[at] as StoredResponse), saved: true };
    });
  } catch (error) {
    await Promise.all(won.map((one) => store.release(one.claim).catch(() => false)));
    for (const one of won) {
      const own = failed?.index === one.index;
      outcomes[one.index] = { index: one.index, scope: one.claim.scope, key: one.claim.key, status: 'failed', error: own ? failed?.error : new BatchRolledBackError(failed?.error ?? error) };
    }
  }
}

/** One item's work and completion inside an open transaction; throws (rolling it back) when either fails. */
async function runOne<Tx, I, T>(
  engine: BatchEngine<Tx>,
  items: readonly BatchItem<I>[],
  fn: (input: I, context: BatchContext<Tx>) => Promise<T>,
  one: Won,
  tx: Tx,
  view: TransactionView,
): Promise<StoredResponse> {
  const response = responseOf(await fn((items[one.index] as BatchItem<I>).input, { claim: one.claim, tx, index: one.index }));
  if (!(await view.complete(one.claim, response, engine.receiver.options.retentionMs))) throw new LeaseLostError(one.claim.scope, one.claim.key);
  return response;
}

/** The saved response of a work's value: its JSON, as `Receiver.run` saves it. */
function responseOf(value: unknown): StoredResponse {
  const text = JSON.stringify(value) as string | undefined;
  return { status: 200, headers: JSON_HEADERS, body: text === undefined ? new Uint8Array() : encoder.encode(text) };
}

/** The value a saved response holds (JSON), `undefined` for an empty body. */
function valueOf<T>(response: StoredResponse): T {
  return (response.body.byteLength === 0 ? undefined : JSON.parse(decoder.decode(response.body))) as T;
}
