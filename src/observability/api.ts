/**
 * The OpenTelemetry API (`@opentelemetry/api`, an optional peer dependency), when it is installed.
 * Loaded synchronously so a receiver can be created without awaiting anything; the API keeps its
 * registered providers on a global, so this copy sees the SDK a user registers through their own import.
 *
 * @module
 */
import { createRequire } from 'node:module';
import type * as Api from '@opentelemetry/api';

/** The API, or `undefined` when `@opentelemetry/api` is not installed (then nothing is recorded). */
export const otel: typeof Api | undefined = load();

// Hot path: docs/hot-path.md#fastify-memory-path
/**
 * The API's trace and metrics singletons (`otel.trace`, `otel.metrics`), read once: each is a getter on
 * the CommonJS exports, which a read on every request would call.
 */
export const traceApi: typeof Api.trace | undefined = otel?.trace;
/** See {@link traceApi}. */
export const metricsApi: typeof Api.metrics | undefined = otel?.metrics;

function load(): typeof Api | undefined {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as typeof Api;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}
