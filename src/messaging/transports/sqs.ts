/**
 * `retrysafe/sqs`: an SQS batch of a Lambda event source mapping run through the inbox. Each record is
 * deduplicated by its message id (or an id of your choosing) in the inbox store, its writes committed with
 * the processed mark; the records that failed are returned as `batchItemFailures` (partial batch
 * response; the mapping needs `ReportBatchItemFailures` on), so SQS redelivers only those. On a FIFO queue
 * the records of one message group run in order, and the group stops at its first failure: every later
 * record of the group is reported failed unprocessed, so none overtakes it.
 * Source: AWS, "Handling errors for an SQS event source in Lambda" (partial batch responses).
 *
 * @module
 */
import type { SQSBatchItemFailure, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { requireFunction, requireIntegerIn, requireNonEmptyString } from '../../core/validate.js';
import type { HandlerContext, Inbox } from '../inbox/inbox.js';

/** Business code for one record under the inbox: write through `tx`; a throw means retry. */
export type SqsRecordHandler<Tx> = (record: SQSRecord, tx: Tx, context: HandlerContext) => Promise<void>;

/** Options of {@link sqsBatchHandler}. */
export interface SqsBatchOptions {
  /** The inbox consumer name: dedup is per (consumer, message id). @defaultValue the record's `eventSourceARN` */
  readonly consumer?: string;
  /**
   * The id a record is deduplicated by. SQS gives a message one `messageId` for all its deliveries, but a
   * producer that sends one message twice makes two ids: name your own (a message attribute, a field of the
   * body) to catch those too. A record without an id is reported failed, so SQS's own redrive policy ends
   * it in the queue's dead-letter queue. @defaultValue `record.messageId`
   */
  readonly messageId?: (record: SQSRecord) => string | undefined;
  /**
   * The queue's redrive policy `maxReceiveCount`, when it has one. SQS moves a message to its dead-letter
   * queue after that many receives (the record's `ApproximateReceiveCount`), whatever the inbox counted, so
   * it must exceed the inbox's `maxAttempts`: the inbox then dead-letters a poison message first (keeping
   * it for `retrysafe inbox redrive`) and acknowledges it. Checked at wrap time.
   */
  readonly maxReceiveCount?: number;
}

/**
 * Wraps `handleRecord` as a Lambda SQS handler returning the partial batch response. Each record goes
 * through `inbox.handle`: processed and duplicates are acknowledged (absent from `batchItemFailures`), a
 * failure is reported for redelivery, and a message that failed the inbox's `maxAttempts` times is
 * dead-lettered in the inbox and acknowledged. A store failure reports the record failed. Records of a
 * standard queue run concurrently; those of one FIFO message group one after the other.
 *
 * @throws TypeError when `handleRecord` is not a function or an option is invalid, or `maxReceiveCount`
 *   does not exceed the inbox's `maxAttempts` (at wrap time)
 * @example
 * ```ts
 * import { sqsBatchHandler } from 'retrysafe/sqs';
 * export const handler = sqsBatchHandler(inbox, async (record, tx) => {
 *   tx.prepare('INSERT INTO orders (id) VALUES (?)').run(JSON.parse(record.body).id);
 * });
 * ```
 */
export function sqsBatchHandler<Tx>(
  inbox: Inbox<Tx>,
  handleRecord: SqsRecordHandler<Tx>,
  options: SqsBatchOptions = {},
): (event: SQSEvent) => Promise<SQSBatchResponse> {
  requireFunction('handleRecord', handleRecord, 'sqsBatchHandler');
  const consumer = options.consumer === undefined ? undefined : requireNonEmptyString('consumer', options.consumer, 255, 'sqsBatchHandler');
  const idOf = requireFunction<(record: SQSRecord) => string | undefined>('messageId', options.messageId ?? ((record: SQSRecord) => record.messageId), 'sqsBatchHandler');
  if (options.maxReceiveCount !== undefined) {
    requireIntegerIn('maxReceiveCount', options.maxReceiveCount, inbox.config.maxAttempts + 1, 1_000, 'sqsBatchHandler');
  }
  /** Whether the record is done with (acknowledged): processed, duplicate or dead-lettered in the inbox. */
  const settle = async (record: SQSRecord): Promise<boolean> => {
    const messageId = idOf(record);
    if (messageId === undefined || messageId === '') return false;
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(record.messageAttributes)) if (value.stringValue !== undefined) headers[name] = value.stringValue;
    try {
      const outcome = await inbox.handle(
        { consumer: consumer ?? record.eventSourceARN, messageId, headers, body: Buffer.from(record.body) },
        (tx, context) => handleRecord(record, tx, context),
      );
      return outcome.status !== 'retry';
    } catch {
      // The store failed (nothing committed) or the id was refused: SQS delivers the record again.
      return false;
    }
  };
  return async (event) => {
    const groups = new Map<string, SQSRecord[]>();
    for (const record of event.Records) {
      // A standard queue's records are each a group of their own.
      const group = record.attributes.MessageGroupId === undefined ? `\0${record.messageId}` : record.attributes.MessageGroupId;
      groups.set(group, [...(groups.get(group) ?? []), record]);
    }
    const failed = new Set<string>();
    await Promise.all(
      [...groups.values()].map(async (records) => {
        for (const [i, record] of records.entries()) {
          if (await settle(record)) continue;
          for (const later of records.slice(i)) failed.add(later.messageId);
          return;
        }
      }),
    );
    // In the batch's order, as SQS lists them.
    const batchItemFailures: SQSBatchItemFailure[] = event.Records.filter((record) => failed.has(record.messageId)).map((record) => ({ itemIdentifier: record.messageId }));
    return { batchItemFailures };
  };
}
