/**
 * `retrysafe/lambda`: Idempotency-Key handling for AWS Lambda behind API Gateway (REST APIs, HTTP APIs with
 * payload format 1.0 or 2.0) and Lambda function URLs, and {@link idempotentFunction} for any other event.
 * Behaviour: as the HTTP adapters ({@link HttpPipeline.handle}), in the event's own result shape.
 *
 * @module
 */
import type { Context } from 'aws-lambda';
import { requireFunction } from '../core/validate.js';
import { BodyTooLargeError } from './body.js';
import { createHttpPipeline, type HttpPipeline, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';
import { capturedResult, eventRequest, eventResult, type HttpEvent, type HttpResult } from './lambda-events.js';
import { boundLeaseToInvocation } from './lambda-lease.js';

export { idempotentFunction, type IdempotentFunctionOptions } from './lambda-function.js';
export type { HttpEvent, HttpResult } from './lambda-events.js';

/** A handler of API Gateway or function URL events, given the idempotency context of its claimed key. */
export type IdempotentHttpHandler<E extends HttpEvent, Tx> = (
  event: E,
  context: Context,
  idempotency: IdempotencyContext<Tx> | undefined,
) => Promise<HttpResult<E>>;

/**
 * Wraps an API Gateway (REST, HTTP API v1 or v2) or function URL handler: a request with an
 * `Idempotency-Key` header (any case; several values are a malformed key) runs once per key and
 * fingerprint (method, path — or the `route` option —, query and body, a base64 body decoded first);
 * retries get the saved response with `Idempotent-Replayed: true`; problems are answered as RFC 9457
 * documents in the event's result shape: 400 key missing or malformed, 409 in progress (with
 * `Retry-After`) or lease lost, 410 response not kept, 413 body too large, 422 key reused with another
 * request, 503 store unavailable. The lease ends no later than the invocation
 * (`context.getRemainingTimeInMillis()`), so a retry after a timeout takes the key over at once.
 *
 * The first response is returned as the handler made it (cookies included); only allow-listed headers are
 * saved for replay. A handler that throws releases the key, and the throw reaches Lambda.
 *
 * @param options - the HTTP adapters' options; `scope` and `route` take the event
 * @throws TypeError naming the option when an option is invalid (at wrap time)
 * @example
 * ```ts
 * import type { APIGatewayProxyEventV2 } from 'aws-lambda';
 * import { idempotentHttpHandler } from 'retrysafe/lambda';
 *
 * export const handler = idempotentHttpHandler(async (event: APIGatewayProxyEventV2) => ({ statusCode: 201, body: '{"id":1}' }), { receiver });
 * ```
 */
export function idempotentHttpHandler<E extends HttpEvent, Tx = undefined>(
  handler: IdempotentHttpHandler<E, Tx>,
  options: IdempotencyOptions<E, Tx>,
): (event: E, context: Context) => Promise<HttpResult<E>> {
  requireFunction('handler', handler, 'idempotentHttpHandler');
  const pipeline: HttpPipeline<E, Tx> = createHttpPipeline(options);
  const { receiver } = options;
  return async (event, context) => {
    const request = eventRequest(event);
    if (!pipeline.applies(request.method)) return handler(event, context, undefined);
    // The handler's own result, returned as is when it ran: the pipeline sees only its captured copy.
    let produced: HttpResult<E> | undefined;
    const outcome = await pipeline.handle(
      {
        request: event,
        method: request.method,
        route: request.path,
        query: request.query,
        headers: { get: (name) => request.headers.get(name) },
        body: () => {
          const bytes = typeof request.body === 'string' ? Buffer.byteLength(request.body) : request.body.byteLength;
          if (bytes > pipeline.maxBodyBytes) throw new BodyTooLargeError(pipeline.maxBodyBytes);
          return request.body;
        },
      },
      async (idempotency) => {
        await boundLeaseToInvocation(receiver, idempotency.claim, context);
        produced = await handler(event, context, idempotency);
        return capturedResult(produced);
      },
    );
    if (outcome.kind === 'pass') return handler(event, context, undefined);
    if (outcome.kind === 'handler' && produced !== undefined) return produced;
    return eventResult(outcome.response);
  };
}
