/**
 * The Fastify plugin's JSON body parser: Fastify's own `application/json` parser (same prototype- and
 * constructor-poisoning settings, same `bodyLimit`), which also hands the body text it parsed to the
 * plugin, so a JSON request's fingerprint is taken over the text Fastify read rather than over bytes the
 * plugin peeked at first.
 *
 * @module
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';

/** Media type the parser is registered for; Fastify hands it every request whose Content-Type has it, parameters aside. */
const JSON_TYPE = 'application/json';

/**
 * Puts the keeping JSON parser in place of Fastify's default one on `app`: `keep` gets each request's body
 * text before it is parsed.
 *
 * @returns `false` when `app` already has a JSON parser of the application's own (Fastify refuses a second
 *   one), which is left in place: the plugin then peeks at the body bytes instead
 */
export function keepJsonText(app: FastifyInstance, keep: (request: FastifyRequest, text: string) => void): boolean {
  const { onProtoPoisoning, onConstructorPoisoning } = app.initialConfig;
  const parse = app.getDefaultJsonParser(onProtoPoisoning ?? 'error', onConstructorPoisoning ?? 'error');
  try {
    app.addContentTypeParser(JSON_TYPE, { parseAs: 'string' }, function keepingJsonParser(request, text, done) {
      keep(request, text as string);
      // Fastify's default parser answers through `done` and returns nothing.
      void parse(request, text as string, done);
    });
  } catch (error) {
    if ((error as { code?: unknown }).code === 'FST_ERR_CTP_ALREADY_PRESENT') return false;
    throw error;
  }
  return true;
}

/**
 * Whether `contentType` has the media type the keeping parser is registered for, as Fastify matches it
 * (case-insensitive, parameters and surrounding spaces aside).
 */
export function isJsonType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  if (contentType === JSON_TYPE) return true;
  const semicolon = contentType.indexOf(';');
  return (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase() === JSON_TYPE;
}
