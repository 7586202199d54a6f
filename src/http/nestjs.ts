/**
 * Idempotency-Key support for NestJS 10 and 11, on the Express and the Fastify platform: a module that
 * installs a global interceptor, a route decorator for per-route settings, and a parameter decorator
 * that hands the handler its idempotency context (and, in transactional mode, the transaction).
 * Behaviour per the HTTP contract of the other adapters; see {@link HttpPipeline.handle}.
 *
 * Why an interceptor that holds the Node response: an interceptor knows the route (so `@Idempotent()`
 * applies) and sees a handler fail before the exception filters answer, and the bytes Nest finally
 * writes — the serialized result, a `StreamableFile`, an exception filter's answer, or what a handler
 * wrote through `@Res()` — all end in the platform's Node `ServerResponse` (Express's `res`, Fastify's
 * `reply.raw`). Holding that response back is what makes the saved response, and so the replay, byte
 * for byte what the first client got, and sends it only once saved (in transactional mode: after COMMIT).
 *
 * The body for the fingerprint, under the one rule the Express middleware shares (`nodeRequestBody` in
 * `body.ts`), in order: a Content-Length over `maxBodyBytes` is answered with a 413 problem before
 * anything is read; a body stream no parser read (Express: a content type other than JSON or a form) is
 * read here, kept as `req.rawBody` and handed on as `req.body` (parsed JSON for `application/json` and
 * `*+json`, text for `text/*`, else a Buffer); otherwise `req.rawBody` — kept by Nest on both platforms
 * when the app is created with `{ rawBody: true }` — as is, or else the parsed `req.body` as canonical
 * JSON (object keys sorted). A body longer than `maxBodyBytes` — read here or by a parser — is answered
 * with a 413 problem before anything is claimed. On Express, a body over Nest's own parser limit (100 kB
 * unless set with `app.useBodyParser`) never reaches the interceptor: body-parser fails it with
 * `entity.too.large` before routing, and the module's error middleware answers that with the same 413
 * problem (its detail names the parser's limit) in place of Nest's plain JSON 413.
 *
 * Peers: `@nestjs/common` and `@nestjs/core` 10 or 11, and what Nest itself needs, `reflect-metadata`
 * (imported once by the application) and `rxjs` 7.
 *
 * @module
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import {
  createParamDecorator,
  SetMetadata,
  type CallHandler,
  type CustomDecorator,
  type DynamicModule,
  type ExecutionContext,
  type FactoryProvider,
  type ModuleMetadata,
  type NestInterceptor,
  type Provider,
} from '@nestjs/common';
import { RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { APP_INTERCEPTOR, HttpAdapterHost, Reflector } from '@nestjs/core';
import { Observable, tap, type Subscription } from 'rxjs';
import { requireBoolean } from '../core/validate.js';
import { BodyTooLargeError, nodeRequestBody } from './body.js';
import { toDictionaryMode } from './dictionary-mode.js';
import {
  createHttpPipeline,
  type CapturedResponse,
  type HttpPipeline,
  type IdempotencyContext,
  type IdempotencyOptions,
  type OutgoingResponse,
} from './pipeline.js';
import { holdResponse, sendFresh, sendHeld } from './held-response.js';
import { answerLateFailure } from './nestjs-late-failure.js';

export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

/**
 * What the options' `scope` and `route` functions are given: the platform's request — Express's
 * `Request` on `@nestjs/platform-express`, Fastify's `FastifyRequest` on `@nestjs/platform-fastify`
 * (both fit this shape; annotate the parameter with your platform's type to read more of it, e.g. the
 * `user` a guard set).
 *
 * @example
 * ```ts
 * IdempotencyModule.forRoot({ receiver, scope: (req: NestRequest) => String(req.headers['x-account-id'] ?? '') });
 * IdempotencyModule.forRoot({ receiver, scope: (req: express.Request & { user: { id: string } }) => req.user.id });
 * ```
 */
export interface NestRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

/**
 * Per-route settings, given to {@link Idempotent} on a route handler or a controller.
 *
 * @example
 * ```ts
 * const optionalKey: IdempotentRouteOptions = { required: false };
 * @Post('drafts') @Idempotent(optionalKey) saveDraft() { … }
 * ```
 */
export interface IdempotentRouteOptions {
  /** Overrides the module's `required` on this route (or every route of this controller). */
  readonly required?: boolean;
  /** `false` turns idempotency off on this route: its requests pass through untouched. @defaultValue true */
  readonly enabled?: boolean;
}

/**
 * The options of {@link IdempotencyModule.forRootAsync}: a factory of the module's options, with the
 * providers it is given.
 *
 * @example
 * ```ts
 * const options: IdempotencyModuleAsyncOptions = {
 *   imports: [ConfigModule],
 *   inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ receiver, required: config.get('IDEMPOTENCY_REQUIRED') === 'true' }),
 * };
 * IdempotencyModule.forRootAsync(options);
 * ```
 */
export interface IdempotencyModuleAsyncOptions<Req extends NestRequest = NestRequest, Tx = unknown> {
  /** Modules whose providers the factory needs. */
  readonly imports?: ModuleMetadata['imports'];
  /** Providers handed to `useFactory`, in order. */
  readonly inject?: FactoryProvider['inject'];
  /** Builds the options (see {@link IdempotencyModule.forRoot}); a bad option fails the application's start. */
  readonly useFactory: (...args: never[]) => IdempotencyOptions<Req, Tx> | Promise<IdempotencyOptions<Req, Tx>>;
}

/** The request as the interceptor reads it: what Express's and Fastify's requests have in common, and what Nest adds. */
interface PlatformRequest extends NestRequest {
  /** Express: the URL before routers rewrote `url`. */
  readonly originalUrl?: string;
  /** Fastify: the Node request under the Fastify one. */
  readonly raw?: IncomingMessage;
  body?: unknown;
  rawBody?: Buffer;
  idempotency?: IdempotencyContext<unknown>;
}

/** Nest's metadata key for {@link Idempotent}. */
const ROUTE_OPTIONS = 'retrysafe:idempotent';

/** Injection token of the module's pipeline. */
const PIPELINE = Symbol('retrysafe.idempotency.pipeline');

/**
 * Per-route Idempotency-Key settings, on a route handler or on a controller (the handler's win).
 *
 * @throws TypeError naming the option when `required` or `enabled` is not a boolean
 * @example
 * ```ts
 * @Controller('search')
 * export class SearchController {
 *   @Post() @Idempotent({ enabled: false }) search() { … }          // never keyed
 *   @Post('saved') @Idempotent({ required: false }) save() { … }   // keyed when the client sends a key
 * }
 * ```
 */
export function Idempotent(options: IdempotentRouteOptions = {}): CustomDecorator<string> {
  if (options.required !== undefined) requireBoolean('required', options.required, '@Idempotent()');
  if (options.enabled !== undefined) requireBoolean('enabled', options.enabled, '@Idempotent()');
  return SetMetadata(ROUTE_OPTIONS, Object.freeze({ ...options }));
}

/**
 * Parameter decorator: the request's {@link IdempotencyContext} (`{ key, scope, claim, tx }`), or
 * `undefined` on a request the interceptor passed through (a method it does not act on, an optional
 * route without a key, a route with `@Idempotent({ enabled: false })`). In transactional mode (a
 * receiver over a transactional PostgreSQL or SQLite store) `tx` is the transaction the claim and the
 * saved response commit in: write the business rows through it.
 *
 * @example
 * ```ts
 * @Post('payments')
 * pay(@Body() body: { amount: number }, @Idempotency() idempotency: IdempotencyContext<PoolClient> | undefined) {
 *   await idempotency?.tx.query('INSERT INTO payments (key, amount) VALUES ($1, $2)', [idempotency.key, body.amount]);
 * }
 * ```
 */
export const Idempotency: () => ParameterDecorator = createParamDecorator(
  (_data: unknown, context: ExecutionContext): IdempotencyContext<unknown> | undefined =>
    context.switchToHttp().getRequest<PlatformRequest>().idempotency,
);

/**
 * The module. Import it once, in the application's root module: its interceptor then applies to every
 * route, acting on the methods in `methods` (POST and PATCH by default); `@Idempotent()` changes it per
 * route.
 *
 * Statuses it answers itself, as `application/problem+json` (RFC 9457): 400 missing or invalid key,
 * 413 body over `maxBodyBytes`, 422 key reused with another request, 409 request in progress (with
 * `Retry-After`), 410 response not kept (over `maxResponseBytes`), 503 store unavailable. A replay carries
 * `Idempotent-Replayed: true` and the saved status, allow-listed headers and body bytes. An exception
 * in the handler (an `HttpException` too) goes through the exception filters as usual; their response
 * is sent, the key is released whatever `shouldPersist` says, and in transactional mode the transaction
 * rolls back. A 4xx the handler returns (e.g. through `@HttpCode()` or `@Res({ passthrough: true })`) is
 * saved and replayed. A failure of the module's own after the handler ran (a `problem` shape that throws
 * on the 409 of a fenced-off holder, a receiver observer that throws as the request ends) is out of the
 * exception filters' reach (Nest has written the handler's result already, or will): it is
 * logged through Nest's `Logger` (context `IdempotencyModule`) and answered with Nest's own 500 for an
 * unknown exception (`{"statusCode":500,"message":"Internal server error"}`), without the handler's
 * headers; a handler still running writes nowhere. A retry replays a response saved before the failure.
 *
 * @example
 * ```ts
 * @Module({ imports: [IdempotencyModule.forRoot({ receiver })], controllers: [PaymentsController] })
 * export class AppModule {}
 * ```
 */
export class IdempotencyModule {
  /**
   * The module with options known up front.
   *
   * @throws TypeError naming the option when an option is invalid (see `createHttpPipeline`)
   * @example
   * ```ts
   * import { Module } from '@nestjs/common';
   * import { createMemoryStore, createReceiver } from 'retrysafe';
   * import { IdempotencyModule } from 'retrysafe/nestjs';
   *
   * @Module({
   *   imports: [IdempotencyModule.forRoot({
   *     receiver: createReceiver({ store: createMemoryStore() }),
   *     scope: (req) => String(req.headers['x-account-id'] ?? ''),
   *   })],
   *   controllers: [PaymentsController],
   * })
   * export class AppModule {}
   * // main.ts: const app = await NestFactory.create(AppModule, { rawBody: true });
   * ```
   */
  static forRoot<Req extends NestRequest = NestRequest, Tx = unknown>(options: IdempotencyOptions<Req, Tx>): DynamicModule {
    const pipeline = createHttpPipeline(options) as unknown as HttpPipeline<NestRequest, unknown>;
    return { module: IdempotencyModule, providers: [{ provide: PIPELINE, useValue: pipeline }, INTERCEPTOR, PARSER_LIMIT, DICTIONARY_MODE] };
  }

  /**
   * The module with options built by a factory from other providers (a configuration service, a
   * database pool).
   *
   * @throws TypeError naming the option, when the application starts, if an option is invalid
   * @example
   * ```ts
   * IdempotencyModule.forRootAsync({
   *   imports: [DatabaseModule],
   *   inject: [PG_POOL],
   *   useFactory: (pool: Pool) => ({
   *     receiver: createReceiver({ store: createPostgresStore({ pool }), transactional: true }),
   *   }),
   * })
   * ```
   */
  static forRootAsync<Req extends NestRequest = NestRequest, Tx = unknown>(options: IdempotencyModuleAsyncOptions<Req, Tx>): DynamicModule {
    const factory = options.useFactory as (...args: unknown[]) => IdempotencyOptions<Req, Tx> | Promise<IdempotencyOptions<Req, Tx>>;
    return {
      module: IdempotencyModule,
      imports: options.imports ?? [],
      providers: [
        {
          provide: PIPELINE,
          useFactory: async (...args: unknown[]) => createHttpPipeline(await factory(...args)),
          inject: options.inject ?? [],
        },
        INTERCEPTOR,
        PARSER_LIMIT,
        DICTIONARY_MODE,
      ],
    };
  }
}

/** Runs every HTTP request through the module's pipeline, holding the Node response until it is saved. */
class IdempotencyInterceptor implements NestInterceptor {
  constructor(
    private readonly pipeline: HttpPipeline<NestRequest, unknown>,
    private readonly reflector: Reflector,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    const settings = this.reflector.getAllAndOverride<IdempotentRouteOptions | undefined>(ROUTE_OPTIONS, [context.getHandler(), context.getClass()]);
    const http = context.switchToHttp();
    const req = http.getRequest<PlatformRequest>();
    if (settings?.enabled === false || !this.pipeline.applies(req.method)) return next.handle();
    const reply = http.getResponse<ServerResponse | { readonly raw: ServerResponse }>();
    const res = 'raw' in reply ? reply.raw : reply;
    const pipeline = this.pipeline;

    return new Observable<unknown>((subscriber) => {
      let inner: Subscription | undefined;
      let ran = false;
      let failed = false;
      const run = (idempotency: IdempotencyContext<unknown>): Promise<CapturedResponse> => {
        ran = true;
        const held = holdResponse(res);
        req.idempotency = idempotency;
        // The error is seen here before the exception filters turn it into a response.
        inner = next.handle().pipe(tap({ error: () => void (failed = true) })).subscribe(subscriber);
        return held.then((response) => (failed ? { ...response, failed } : response));
      };
      pipeline
        .handle(
          {
            request: req,
            ...requestParts(req),
            body: () => nodeRequestBody(req, req.raw ?? (req as unknown as IncomingMessage), pipeline.maxBodyBytes),
            required: settings?.required,
          },
          run,
        )
        .then(
          (outcome) => {
            if (outcome.kind === 'pass') inner = next.handle().subscribe(subscriber);
            else if (outcome.kind === 'handler') sendHeld(res, outcome.response);
            else if (ran) sendFresh(res, outcome.response);
            else answerInstead(context, res, outcome.response, subscriber);
          },
          (error: unknown) => {
            if (ran) answerLateFailure(res, error);
            else subscriber.error(error);
          },
        );
      return () => inner?.unsubscribe();
    });
  }
}

/**
 * Sends a replay or a problem for a handler that did not run. Nest still sends the interceptor's result
 * (unless the route answers through `@Res()` itself), so that is held and the saved response goes in its
 * place: written first, ours would meet Nest's writes on a response already sent.
 */
function answerInstead(context: ExecutionContext, res: ServerResponse, response: OutgoingResponse, subscriber: { next(value: unknown): void; complete(): void }): void {
  if (respondsItself(context)) {
    sendFresh(res, response);
  } else {
    void holdResponse(res).then(() => sendFresh(res, response));
  }
  subscriber.next(undefined);
  subscriber.complete();
}

/** Whether Nest leaves the response to the handler: a `@Res()` or `@Next()` parameter without `passthrough`. */
function respondsItself(context: ExecutionContext): boolean {
  const controller = context.getClass();
  const method = context.getHandler().name;
  const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) ?? {}) as Record<string, unknown>;
  const handled = Object.keys(params).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === Number(RouteParamtypes.RESPONSE) || type === Number(RouteParamtypes.NEXT);
  });
  return handled && Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method) !== true;
}

const INTERCEPTOR: Provider = {
  provide: APP_INTERCEPTOR,
  useFactory: (pipeline: HttpPipeline<NestRequest, unknown>, reflector: Reflector) => new IdempotencyInterceptor(pipeline, reflector),
  inject: [PIPELINE, Reflector],
};

/** A body-parser error for a body over the parser's limit (`entity.too.large`, with the limit in bytes). */
interface ParserLimitError {
  readonly type: 'entity.too.large';
  readonly limit: number;
}

function isParserLimit(error: unknown): error is ParserLimitError {
  return typeof error === 'object' && error !== null && (error as { type?: unknown }).type === 'entity.too.large' && typeof (error as { limit?: unknown }).limit === 'number';
}

/**
 * On Express, an error middleware (added when the module starts: after Nest's parsers and routes, before
 * Nest's own error handler) that answers a body-parser `entity.too.large` on a request the pipeline acts
 * on with the pipeline's 413 problem, as a body over `maxBodyBytes` is answered; every other error, and a
 * request the pipeline passes (another method, no key on an optional route), goes on to Nest. The route is
 * not known yet there: an `@Idempotent({ enabled: false })` route with a key gets the problem too. Fastify
 * answers its own body limit (`FST_ERR_CTP_BODY_TOO_LARGE`) as before.
 */
function answerParserLimit(host: HttpAdapterHost, pipeline: HttpPipeline<NestRequest, unknown>): void {
  const adapter = host.httpAdapter as HttpAdapterHost['httpAdapter'] | undefined;
  if (adapter?.getType() !== 'express') return;
  adapter.use((error: unknown, req: PlatformRequest & IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => {
    if (!isParserLimit(error) || !pipeline.applies(req.method)) {
      next(error);
      return;
    }
    pipeline
      .handle(
        {
          request: req,
          ...requestParts(req),
          body: () => {
            throw new BodyTooLargeError(error.limit);
          },
        },
        () => Promise.reject(new Error('a body over the parser limit never reaches the handler')),
      )
      .then((outcome) => (outcome.kind === 'pass' ? next(error) : sendFresh(res, outcome.response)), next);
  });
}

/**
 * On Express, a middleware added when the module's providers are created (inside `NestFactory.create`:
 * before Nest adds its body parsers and routes at `init()`) that turns the request and the response of a
 * method the pipeline acts on into dictionaries ({@link toDictionaryMode}) before the parsers, the router
 * and the interceptor's hold add their properties. Under `@nestjs/testing` the providers are created
 * before the adapter exists: the middleware is not added, and nothing else changes.
 */
function addDictionaryMode(host: HttpAdapterHost, pipeline: HttpPipeline<NestRequest, unknown>): void {
  const adapter = host.httpAdapter as HttpAdapterHost['httpAdapter'] | undefined;
  if (adapter?.getType() !== 'express') return;
  // Hot path: docs/hot-path.md#express-dictionary-mode
  adapter.use(function idempotencyDictionaryMode(req: IncomingMessage, res: ServerResponse, next: () => void): void {
    if (pipeline.applies(req.method ?? '')) {
      toDictionaryMode(req);
      toDictionaryMode(res);
    }
    next();
  });
}

const DICTIONARY_MODE: Provider = {
  provide: Symbol('retrysafe.idempotency.dictionary-mode'),
  useFactory: (pipeline: HttpPipeline<NestRequest, unknown>, host: HttpAdapterHost) => addDictionaryMode(host, pipeline),
  inject: [PIPELINE, HttpAdapterHost],
};

/** Installs {@link answerParserLimit} once the application's HTTP adapter exists. */
const PARSER_LIMIT: Provider = {
  provide: Symbol('retrysafe.idempotency.parser-limit'),
  useFactory: (pipeline: HttpPipeline<NestRequest, unknown>, host: HttpAdapterHost) => ({ onModuleInit: () => answerParserLimit(host, pipeline) }),
  inject: [PIPELINE, HttpAdapterHost],
};

/** The method, route, query and headers the pipeline reads off a Nest request (Express or Fastify platform). */
function requestParts(req: PlatformRequest): { method: string; route: string; query: string; headers: { get(name: string): string | undefined } } {
  const url = req.originalUrl ?? req.url;
  const queryAt = url.indexOf('?');
  return {
    method: req.method,
    route: queryAt === -1 ? url : url.slice(0, queryAt),
    query: queryAt === -1 ? '' : url.slice(queryAt + 1),
    headers: { get: (name) => joinHeader(req.headers, name) },
  };
}

function joinHeader(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}
