/**
 * The instrumentation scope every retrysafe meter and tracer is obtained under.
 *
 * @module
 */

/** Name and version of the instrumentation scope every retrysafe meter and tracer is obtained under. */
export const INSTRUMENTATION_SCOPE = 'retrysafe';
/** The package version reported with the instrumentation scope. */
export const INSTRUMENTATION_VERSION = '0.3.0';
