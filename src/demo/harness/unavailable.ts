/**
 * The error of a missing service: the orders scenario needs PostgreSQL, and RabbitMQ unless it runs on Kafka.
 *
 * @module
 */
import { redactUrl } from '../../store-url.js';

/** PostgreSQL or RabbitMQ did not answer; the CLI prints the message and exits with code 2. */
export class ServiceUnavailableError extends Error {
  override readonly name = 'ServiceUnavailableError';

  /**
   * @param service - `PostgreSQL` or `RabbitMQ`
   * @param url - the URL tried; its password is masked in the message
   * @param option - the CLI option that points the scenario at another server, e.g. `--amqp amqp://…`
   */
  constructor(service: string, url: string, cause: unknown, option: string) {
    super(
      `${service} is not reachable at ${redactUrl(url)}: ${cause instanceof Error ? cause.message : String(cause)}. ` +
        `The orders scenario needs it; start it or pass ${option}.`,
      { cause },
    );
  }
}
