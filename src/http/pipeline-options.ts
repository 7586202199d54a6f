/**
 * The options of the HTTP adapters as the pipeline holds them: their defaults, and the one check of what an
 * adapter was given (`createHttpPipeline` runs it once, at registration).
 *
 * @module
 */
import type { ProblemShape } from '../core/problem.js';
import { DEFAULT_PROBLEM_TYPE_BASE, problemDetailsShape } from '../core/problem.js';
import { RESPONSE_NOT_KEPT_HEADER } from '../core/record.js';
import type { Receiver } from '../core/receiver.js';
import { describe, invalidOption, requireBoolean, requireFunction, requireOptions } from '../core/validate.js';
import type { IdempotencyOptions } from './pipeline.js';

/** Default of {@link IdempotencyOptions.methods}: the non-idempotent methods a client retries with a key. */
export const DEFAULT_METHODS: readonly string[] = Object.freeze(['POST', 'PATCH']);

/** Default of {@link IdempotencyOptions.replayHeaders}: representation metadata that is safe to replay. */
export const DEFAULT_REPLAY_HEADERS: readonly string[] = Object.freeze([
  'content-type',
  'content-language',
  'content-location',
  'location',
  'etag',
  'last-modified',
  'cache-control',
  'link',
]);

/** Headers that are never saved for replay, whatever the allow-list says. */
const NEVER_REPLAYED = new Set(['set-cookie', RESPONSE_NOT_KEPT_HEADER]);

/** The resolved, frozen options of an {@link HttpPipeline}. */
export interface ResolvedOptions<Req, Tx> {
  readonly receiver: Receiver<Tx>;
  readonly required: boolean;
  readonly methods: ReadonlySet<string>;
  readonly scope: (req: Req) => string | Promise<string>;
  readonly route: ((req: Req) => string) | undefined;
  readonly replayHeaders: ReadonlySet<string>;
  readonly problemTypeBase: string;
  readonly retryAfterSeconds: number;
  readonly problem: ProblemShape;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
}

/** Checks the adapter options once and resolves their defaults (see `createHttpPipeline` for what it throws). */
export function resolveOptions<Req, Tx>(options: IdempotencyOptions<Req, Tx>): ResolvedOptions<Req, Tx> {
  requireOptions('the idempotency middleware', options);
  if (!isReceiver(options.receiver)) throw invalidOption('receiver', 'a Receiver (see createReceiver)', options.receiver);
  const required = requireBoolean('required', options.required ?? true);
  const methods: unknown = options.methods ?? DEFAULT_METHODS;
  if (!isStringArray(methods, METHOD_NAME) || methods.length === 0) throw invalidOption('methods', 'a non-empty array of HTTP method names', methods);
  const scope = requireFunction<(req: Req) => string | Promise<string>>('scope', options.scope ?? noScope);
  const route = options.route === undefined ? undefined : requireFunction<(req: Req) => string>('route', options.route);
  const replayHeaders: unknown = options.replayHeaders ?? DEFAULT_REPLAY_HEADERS;
  if (!isStringArray(replayHeaders, HEADER_NAME)) throw invalidOption('replayHeaders', 'an array of lower-case header names', replayHeaders);
  const refused = replayHeaders.find((name) => NEVER_REPLAYED.has(name));
  if (refused !== undefined) throw invalidOption('replayHeaders', `a list without ${describe(refused)} (cookies are never stored or replayed)`, replayHeaders);
  const problemTypeBase: unknown = options.problemTypeBase ?? DEFAULT_PROBLEM_TYPE_BASE;
  if (typeof problemTypeBase !== 'string') throw invalidOption('problemTypeBase', 'a string', problemTypeBase);
  const retryAfterSeconds: unknown = options.retryAfterSeconds ?? 1;
  if (!isNonNegativeInteger(retryAfterSeconds)) throw invalidOption('retryAfterSeconds', 'a non-negative integer number of seconds', retryAfterSeconds);
  const problem = requireFunction<ProblemShape>('problem', options.problem ?? problemDetailsShape);
  const maxBodyBytes: unknown = options.maxBodyBytes ?? 1_048_576;
  if (!isNonNegativeInteger(maxBodyBytes)) throw invalidOption('maxBodyBytes', 'a non-negative integer number of bytes', maxBodyBytes);
  const maxResponseBytes: unknown = options.maxResponseBytes ?? 1_048_576;
  if (!isNonNegativeInteger(maxResponseBytes)) throw invalidOption('maxResponseBytes', 'a non-negative integer number of bytes', maxResponseBytes);
  return Object.freeze({
    receiver: options.receiver,
    maxBodyBytes,
    maxResponseBytes,
    required,
    methods: new Set(methods.map((m) => m.toUpperCase())),
    scope,
    route,
    replayHeaders: new Set(replayHeaders),
    problemTypeBase,
    retryAfterSeconds,
    problem,
  });
}

/** Method names as the `methods` option takes them (any case), and header names as `replayHeaders` does (RFC 9110 tokens, lower case). */
const METHOD_NAME = /^[A-Za-z]+$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;

/** The default `scope`: every key in one namespace. */
function noScope(): string {
  return '';
}

function isReceiver(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as Partial<Receiver<unknown>>).execute === 'function';
}

function isNonNegativeInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function isStringArray(value: unknown, pattern: RegExp): value is readonly string[] {
  return Array.isArray(value) && value.every((item) => typeof item === 'string' && pattern.test(item));
}
