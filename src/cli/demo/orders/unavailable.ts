/**
 * The error of a missing service: the orders scenario needs PostgreSQL and RabbitMQ running.
 *
 * @module
 */

/** PostgreSQL or RabbitMQ did not answer; the CLI prints the message and exits with code 2. */
export class ServiceUnavailableError extends Error {
  override readonly name = 'ServiceUnavailableError';

  /**
   * @param service - `PostgreSQL` or `RabbitMQ`
   * @param url - the URL tried, with any password masked
   */
  constructor(service: string, url: string, cause: unknown) {
    super(
      `${service} is not reachable at ${url}: ${cause instanceof Error ? cause.message : String(cause)}. ` +
        `The orders scenario needs PostgreSQL and RabbitMQ; start them or pass --store postgres://… / --amqp amqp://….`,
      { cause },
    );
  }
}

/** `url` with its password replaced by `***`, for messages. */
export function maskUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}
