/**
 * How the JetStream consumers (`startNatsConsumer`, `startNatsBatchConsumer`) read a message: its id and
 * the {@link BrokerMessage} the processor sees.
 *
 * @module
 */
import type { JsMsg } from 'nats';
import type { BrokerMessage } from '../inbox/processor.js';

/** The `Nats-Msg-Id` header (JetStream's own publish dedup id), when present and not empty. */
export function defaultMessageId(message: JsMsg): string | undefined {
  const id = message.headers?.get('Nats-Msg-Id');
  return id === undefined || id === '' ? undefined : id;
}

/** A message as the processor sees it: its headers (one value per name), data and `redelivered`. */
export function toBrokerMessage(message: JsMsg, id: string | undefined): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const name of message.headers?.keys() ?? []) headers[name] = message.headers?.get(name) ?? '';
  return { id, headers, body: message.data, redelivered: message.redelivered };
}
