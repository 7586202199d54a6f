/**
 * The paged, strongly consistent scan behind the store's listings (`reap`, `listAbandoned`,
 * `listRecords`, `countExpiredLeases`).
 *
 * @module
 */
import { ScanCommand } from '@aws-sdk/client-dynamodb';
import type { DynamodbStoreConfig } from './config.js';
import { namesIn } from './expression.js';
import type { Item } from './layout.js';

/** Items DynamoDB is asked to evaluate per page (it also stops a page at 1 MB read). */
const PAGE_ITEMS = 500;

/**
 * Walks the whole table one page at a time, yielding each page's items that match `filter` (all items when
 * `undefined`), with only the `projection` attributes when one is given. A filter does not reduce the read
 * capacity a scan consumes: every item is read.
 */
export async function* scanItems(
  config: Pick<DynamodbStoreConfig, 'client' | 'table' | 'names'>,
  filter: string | undefined,
  values: Item,
  projection: string | undefined,
): AsyncGenerator<Item[]> {
  let start: Item | undefined;
  do {
    const names = namesIn(config.names, filter, projection);
    const page = await config.client.send(
      new ScanCommand({
        TableName: config.table,
        ConsistentRead: true,
        Limit: PAGE_ITEMS,
        ...(filter !== undefined && { FilterExpression: filter }),
        ...(Object.keys(values).length > 0 && { ExpressionAttributeValues: values }),
        ...(Object.keys(names).length > 0 && { ExpressionAttributeNames: names }),
        ...(projection !== undefined && { ProjectionExpression: projection }),
        ...(start !== undefined && { ExclusiveStartKey: start }),
      }),
    );
    yield page.Items ?? [];
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
}
