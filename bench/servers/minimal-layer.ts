/**
 * The least an idempotency layer does on Fastify, for measurement only: a reference point between bare
 * Fastify and retrysafe's plugin, not a product. It keeps the raw body text, hashes method, URL and body
 * (SHA-256), looks the key up in one `Map`, answers 422 for another fingerprint, 409 while in flight, and
 * replays a saved status, `Content-Type` and body; `onSend` saves the response. It has no lease, fencing,
 * retention, scope, problem details, release of failed requests, or holding of the response until it is
 * saved (the map write is synchronous), and trusts the key as sent.
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

interface MinimalRecord {
  readonly fingerprint: string;
  status: number;
  type: string;
  body: unknown;
}

declare module 'fastify' {
  interface FastifyRequest {
    minimalText: string | null;
    minimalRecord: MinimalRecord | null;
  }
}

/** Adds the minimal layer's JSON parser and hooks to `app`. */
export function addMinimalLayer(app: FastifyInstance): void {
  const records = new Map<string, MinimalRecord>();
  app.decorateRequest('minimalText', null);
  app.decorateRequest('minimalRecord', null);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    request.minimalText = text as string;
    try {
      done(null, JSON.parse(text as string));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
  app.addHook('preHandler', (request, reply, done) => {
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string') {
      done();
      return;
    }
    const fingerprint = createHash('sha256').update(request.method).update(request.url).update(request.minimalText ?? '').digest('base64');
    const existing = records.get(key);
    if (existing === undefined) {
      const record: MinimalRecord = { fingerprint, status: 0, type: '', body: '' };
      records.set(key, record);
      request.minimalRecord = record;
      done();
    } else if (existing.fingerprint !== fingerprint) {
      void reply.code(422).send({ error: 'key reused' });
    } else if (existing.status === 0) {
      void reply.code(409).send({ error: 'in flight' });
    } else {
      void reply.code(existing.status).header('content-type', existing.type).header('idempotent-replayed', 'true').send(existing.body);
    }
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    const record = request.minimalRecord;
    if (record !== null) {
      record.status = reply.statusCode;
      record.type = String(reply.getHeader('content-type'));
      record.body = payload;
    }
    done(null, payload);
  });
}
