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

function load(): typeof Api | undefined {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as typeof Api;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}
