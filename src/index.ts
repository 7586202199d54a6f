/**
 * retrysafe core: the engine, the store contract, the in-memory store, key parsing, fingerprints and the
 * typed errors. Adapters live under subpaths (`retrysafe/express`, `retrysafe/sqlite`, …).
 *
 * @module
 */
export { ManualClock, systemClock, type Clock } from './core/clock.js';
export {
  completeAbandoned,
  type AbandonedRecordRef,
  type CompleteAbandonedOptions,
  type CompletionReport,
} from './phases/completer.js';
export { derivedKey } from './phases/derived-key.js';
export {
  CompensationFailedError,
  IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  IdempotencyKeyReusedError,
  LeaseLostError,
  ModuleError,
  RecoveryPointUnresumableError,
  RequestInProgressError,
  ResponseNotKeptError,
  SchemaTooNewError,
  StoreClosedError,
  StoreMisuseError,
  StoreUnavailableError,
  TerminalPhaseError,
  TransactionAbortedError,
  type ErrorCode,
  type HttpErrorCode,
  type IdempotencyErrorCode,
  type LeaseLostReason,
} from './core/errors.js';
export { canonicalQuery, fingerprint, type FingerprintInput } from './core/fingerprint.js';
export { MAX_KEY_LENGTH, parseIdempotencyKey } from './core/key.js';
export {
  definePhases,
  type CompensationContext,
  type Phase,
  type PhaseContext,
  type PhasePlan,
  type PhasePlanInput,
  type SagaFailure,
} from './phases/plan.js';
export { sagaStatusOf, type SagaStatus } from './phases/saga.js';
export {
  createPhaseRunner,
  type PhasedExecution,
  type PhaseRunner,
  type PhaseRunnerOptions,
  type PlainPhaseRunnerOptions,
  type TransactionalPhaseRunnerOptions,
} from './phases/runner.js';
export {
  DEFAULT_PROBLEM_TYPE_BASE,
  describeProblem,
  encodeProblem,
  isHttpErrorCode,
  problemDetailsShape,
  problemFor,
  type EncodedProblem,
  type Problem,
  type ProblemAnswer,
  type ProblemDetails,
  type ProblemResponse,
  type ProblemShape,
} from './core/problem.js';
export { stripeErrorShape, type StripeErrorBody, type StripeErrorType } from './core/stripe-error-shape.js';
export {
  type ExecutionContext,
  type Execution,
  type InFlightPolicy,
  type OperationId,
  type Receiver,
  type ReceiverOptions,
} from './core/receiver.js';
export { createReceiver, type PlainReceiverOptions, type TransactionalReceiverOptions } from './receiver.js';
export { BatchRolledBackError, type BatchContext, type BatchItem, type BatchOptions, type BatchOutcome, type BatchStatus } from './core/batch.js';
export { decodeRecoveryPoint, encodeRecoveryPoint, type RecoveryPoint, type SagaProgress } from './phases/recovery-point.js';
export { type ReplayCacheOptions } from './core/replay-cache.js';
export { fencingHeaders, type Claim, type IdempotencyRecord, type RecordState, type StoredResponse } from './core/record.js';
export { createMemoryStore, type MemoryStoreOptions } from './stores/memory.js';
export { HEALTH_PROBE_INTERVAL_MS, HEALTH_PROBE_SCOPE, STUCK_KEY_LIMIT, type ComponentHealth, type ReceiverHealth } from './core/health.js';
export {
  checkHealth,
  inboxHealthCheck,
  outboxHealthCheck,
  type HealthCheck,
  type HealthReport,
  type OutboxBacklog,
} from './observability/health.js';
export { keyHash, type LogEvent, type Logger } from './observability/logging.js';
export { INSTRUMENTATION_SCOPE } from './observability/scope.js';
export { RECEIVER_INSTRUMENTS, type MetricsOptions } from './observability/metrics.js';
export type {
  Observation,
  ReceiverObserver,
  RequestOutcome,
  StoreCallObservation,
  StoreCallResult,
  StoreOperation,
} from './core/observer.js';
export type { ObservabilityOptions } from './observability/observer.js';
export { RECEIVER_SPANS, type TracesOptions } from './observability/traces.js';
export type { ClaimInput, ClaimResult, IdempotencyStore, TransactionalStore } from './core/store.js';
