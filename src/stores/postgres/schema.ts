/**
 * The schema name every PostgreSQL object of retrysafe lives in: validated once, then only ever used
 * quoted, so a configured name can neither inject SQL nor change case.
 *
 * @module
 */
import { invalidOption } from '../../core/validate.js';

/** The schema used when none is configured. */
export const DEFAULT_SCHEMA = 'retrysafe';

/**
 * Longest accepted schema name. PostgreSQL allows 63 bytes per identifier; the notification channel
 * (`<schema>_completed`) must fit in the same limit, so the schema gets 48.
 */
const MAX_SCHEMA_LENGTH = 48;

const SCHEMA_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A validated schema name and the SQL fragments derived from it. */
export interface SchemaNames {
  /** The name as configured, e.g. `retrysafe`. */
  readonly name: string;
  /** The name as a quoted SQL identifier, e.g. `"retrysafe"`. */
  readonly quoted: string;
  /** The LISTEN/NOTIFY channel on which completions and releases are announced, e.g. `retrysafe_completed`. */
  readonly channel: string;
}

/**
 * Validates a schema name: ASCII letters, digits and `_`, not starting with a digit, 1 to
 * {@link MAX_SCHEMA_LENGTH} characters. Case is kept (the name is always quoted).
 *
 * @param option - the option's name, for the error message
 * @throws TypeError naming the option and value when the name is not acceptable
 */
export function schemaNames(option: string, value: unknown): SchemaNames {
  if (typeof value !== 'string' || value.length > MAX_SCHEMA_LENGTH || !SCHEMA_PATTERN.test(value)) {
    throw invalidOption(option, `1-${MAX_SCHEMA_LENGTH} ASCII letters, digits or "_" not starting with a digit`, value);
  }
  return Object.freeze({ name: value, quoted: `"${value}"`, channel: `${value}_completed` });
}
