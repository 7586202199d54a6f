/**
 * How the RabbitMQ consumers (`startAmqpConsumer`, `startAmqpBatchConsumer`) read a delivery: its id and
 * the {@link BrokerMessage} the processor sees.
 *
 * @module
 */
import type { ConsumeMessage } from 'amqplib';
import type { BrokerMessage } from '../inbox/processor.js';

/** The AMQP `messageId` property when it is a string. */
export function defaultMessageId(message: ConsumeMessage): string | undefined {
  const id: unknown = message.properties.messageId;
  return typeof id === 'string' ? id : undefined;
}

/** A delivery as the processor sees it: headers flattened to strings (`content-type` added), the body, `redelivered`. */
export function toBrokerMessage(message: ConsumeMessage, id: string | undefined): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.properties.headers ?? {})) {
    if (value === undefined || value === null) continue;
    headers[name] = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : JSON.stringify(value);
  }
  const contentType: unknown = message.properties.contentType;
  if (typeof contentType === 'string') headers['content-type'] = contentType;
  return {
    id,
    headers,
    body: new Uint8Array(message.content.buffer, message.content.byteOffset, message.content.byteLength),
    redelivered: message.fields.redelivered,
  };
}
