/**
 * `retrysafe/outbox`: the transactional outbox on PostgreSQL and its relay. Broker
 * publishers live under `retrysafe/amqp-publisher`, `retrysafe/nats-publisher` and `retrysafe/webhook`.
 *
 * @module
 */
export {
  createOutbox,
  type EnqueueOptions,
  type Outbox,
  type OutboxDeadLetter,
  type OutboxInput,
  type OutboxOptions,
  type OutboxStatus,
  type Queryable,
  type ReapOptions,
} from './outbox.js';
export { createRelay, type Relay } from './relay.js';
export { RELAY_DEFAULTS, type RelayOptions } from './relay-options.js';
export { OutboxError, PublishError, PublishTimeoutError, type OutboxErrorCode } from './errors.js';
export { derivedMessageId, OUTBOX_ID_NAMESPACE } from './ids.js';
export { OUTBOX_INSTRUMENTS, type OutboxEvent, type OutboxEventType, type OutboxMessageOutcome, type RelayWakeCause } from './metrics.js';
export type { OutboxMessage, OutboxPublisher } from './publisher.js';
export { OUTBOX_STATUS, type OutboxRowStatus } from './statements.js';
