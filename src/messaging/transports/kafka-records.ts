/**
 * The Kafka records the consumers read and write: the headers the transport owns, a record as the
 * processor sees it, and a dead letter's record.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import type { BrokerMessage } from '../inbox/processor.js';

/** The header carrying the outbox message id (the id the consumer's inbox deduplicates on). */
export const KAFKA_MESSAGE_ID_HEADER = 'Retrysafe-Message-Id';
/** Header of a dead letter: why it was dead-lettered, `dead_letter` (the inbox gave up) or `reject` (no message id). */
export const KAFKA_DEAD_LETTER_REASON_HEADER = 'Retrysafe-Dead-Letter-Reason';
/** Header of a dead letter: the topic, partition and offset it was read from, as `topic/partition/offset`. */
export const KAFKA_DEAD_LETTER_SOURCE_HEADER = 'Retrysafe-Dead-Letter-Source';

/** The {@link KAFKA_MESSAGE_ID_HEADER} header, when present and not empty. */
export function defaultMessageId(message: KafkaJS.KafkaMessage): string | undefined {
  const id = headerText(message.headers?.[KAFKA_MESSAGE_ID_HEADER]);
  return id === undefined || id === '' ? undefined : id;
}

function headerText(value: KafkaJS.IHeaders[string]): string | undefined {
  if (value === undefined) return undefined;
  // A header repeated in one record arrives as an array; the last one wins, as in a flattened map.
  const last = Array.isArray(value) ? value[value.length - 1] : value;
  if (last === undefined) return undefined;
  return typeof last === 'string' ? last : last.toString('utf8');
}

/** A record as the processor sees it: headers flattened to UTF-8 strings, the value's bytes. */
export function toBrokerMessage(message: KafkaJS.KafkaMessage, id: string | undefined, redelivered: boolean): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    const text = headerText(value);
    if (text !== undefined) headers[name] = text;
  }
  const value = message.value ?? Buffer.alloc(0);
  return { id, headers, body: new Uint8Array(value.buffer, value.byteOffset, value.byteLength), redelivered };
}

/** The dead letter of `message`: its key, value and headers, plus the reason and source headers. */
export function deadLetterRecord(message: KafkaJS.KafkaMessage, reason: 'dead_letter' | 'reject', source: string): KafkaJS.Message {
  return {
    key: message.key,
    value: message.value,
    headers: { ...message.headers, [KAFKA_DEAD_LETTER_REASON_HEADER]: reason, [KAFKA_DEAD_LETTER_SOURCE_HEADER]: source },
  };
}
