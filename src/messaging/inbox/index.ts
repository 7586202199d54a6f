/**
 * `retrysafe/inbox`: the idempotent consumer. Processed message ids are recorded in the consumer's own
 * transaction, on PostgreSQL or SQLite; retries are counted durably; poison and crash-looping messages
 * are dead-lettered and can be redriven. Broker adapters: `retrysafe/amqp`, `retrysafe/nats`.
 *
 * @module
 */
export { createInbox, type Delivery, type HandlerContext, type Inbox, type InboxHandler, type InboxOutcome } from './inbox.js';
export type { InboxBatchHandler, InboxBatchOutcome } from './batch.js';
export { INBOX_DEFAULTS, type InboxOptions, type ResolvedInboxOptions } from './options.js';
export { HandlerTimeoutError, InboxError, MAX_MESSAGE_ID_LENGTH, MessageIdMissingError, type InboxErrorCode } from './errors.js';
export { INBOX_INSTRUMENTS, type InboxEvent, type InboxEventType, type InboxMessageOutcome } from './metrics.js';
export { INBOX_SPANS } from './traces.js';
export { createPostgresInboxStore, type PostgresInboxStoreOptions } from './postgres.js';
export { createSqliteInboxStore, type SqliteInboxStore, type SqliteInboxStoreOptions } from './sqlite.js';
export { inboxBatchProcessor, type BatchProcessor } from './batch-processor.js';
export { inboxProcessor, type BrokerMessage, type Disposition, type MessageProcessor, type MessageHandler, type RedriveOptions } from './processor.js';
export type {
  BatchBeginResult,
  BatchItem,
  BatchItemResult,
  BeginResult,
  DeadLetter,
  FailureResult,
  InboxStore,
  StoredMessage,
  TransactionHandler,
} from './store.js';
