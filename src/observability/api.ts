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

/**
 * Reports a throw from the user's telemetry (a span processor's `onStart` or `onEnd`, a meter's instrument)
 * to the API's diagnostic logger (`diag.error`, silent unless one is set with `diag.setLogger`), and
 * otherwise ignores it: telemetry never changes a request's outcome.
 */
export function telemetryThrew(error: unknown): void {
  try {
    otel?.diag.error('retrysafe: telemetry threw; ignored', error);
  } catch {
    return;
  }
}

function load(): typeof Api | undefined {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as typeof Api;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}
