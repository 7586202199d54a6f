/**
 * The `dynamodb://` store URL: which table, region and endpoint it names. Free of the AWS SDK, so parsing a
 * store URL (`retrysafe/store-url`) loads no optional peer.
 *
 * @module
 */
import type { DynamodbKeySchema } from './layout.js';

/** What a `dynamodb://` URL names. */
export interface DynamodbUrl {
  readonly table: string;
  /** `undefined`: the SDK's own (`AWS_REGION`, the profile). */
  readonly region: string | undefined;
  /** `undefined`: AWS's endpoint for the region. */
  readonly endpoint: string | undefined;
  readonly keySchema: DynamodbKeySchema;
  readonly ttlAttribute: string;
}

const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;
const PARAMETERS = new Set(['region', 'endpoint', 'partitionKey', 'sortKey', 'ttlAttribute']);

/**
 * Parses `dynamodb://TABLE[?region=R][&endpoint=URL][&partitionKey=pk][&sortKey=sk][&ttlAttribute=ttl]`.
 * TABLE defaults to `retrysafe`; an empty `sortKey=` names a table with a partition key only. The table
 * name is taken as written (a URL host would be lower-cased).
 *
 * @returns the parsed URL, or a reason string when it is malformed
 */
export function parseDynamodbUrl(url: string): DynamodbUrl | string {
  const match = /^dynamodb:\/\/([^?#]*)(?:\?([^#]*))?$/i.exec(url);
  if (match === null) return 'expected dynamodb://TABLE?region=…&endpoint=…';
  const table = match[1] === '' || match[1] === undefined ? 'retrysafe' : decodeURIComponent(match[1]);
  if (!TABLE_NAME.test(table)) return `the table name ${JSON.stringify(table)} must be 3 to 255 letters, digits, "_", "-" or "."`;
  const parameters = new URLSearchParams(match[2] ?? '');
  for (const name of parameters.keys()) {
    if (!PARAMETERS.has(name)) return `unknown parameter "${name}" (known: ${[...PARAMETERS].join(', ')})`;
    if (parameters.getAll(name).length > 1) return `parameter "${name}" given twice`;
  }
  const endpoint = parameters.get('endpoint') ?? undefined;
  if (endpoint !== undefined && !/^https?:\/\/[^/]/.test(endpoint)) return `?endpoint= must be an http:// or https:// URL, got ${JSON.stringify(endpoint)}`;
  const partitionKey = parameters.get('partitionKey') ?? 'pk';
  const sortKey = parameters.get('sortKey') ?? 'sk';
  const ttlAttribute = parameters.get('ttlAttribute') ?? 'ttl';
  if (partitionKey === '' || ttlAttribute === '') return '?partitionKey= and ?ttlAttribute= must not be empty';
  return {
    table,
    region: parameters.get('region') ?? undefined,
    endpoint,
    keySchema: { partitionKey, sortKey: sortKey === '' ? undefined : sortKey },
    ttlAttribute,
  };
}
