/**
 * The pieces every DynamoDB request of the store shares: the `#name` placeholders an expression uses (a
 * request naming one it does not use is refused), and the old item a failed condition hands back.
 *
 * @module
 */
import { ConditionalCheckFailedException, GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Item } from './layout.js';

/**
 * `ExpressionAttributeNames` for exactly the `#name` placeholders that occur in `expressions`, each
 * mapped through `names` (the record attributes, the key attributes and the TTL attribute).
 *
 * @throws Error when an expression uses a placeholder `names` does not define (a bug in the store)
 */
export function namesIn(names: Readonly<Record<string, string>>, ...expressions: (string | undefined)[]): Record<string, string> {
  const used: Record<string, string> = {};
  for (const expression of expressions) {
    if (expression === undefined) continue;
    for (const [placeholder] of expression.matchAll(/#\w+/g)) {
      const name = names[placeholder];
      if (name === undefined) throw new Error(`retrysafe: no attribute name for ${placeholder}`);
      used[placeholder] = name;
    }
  }
  return used;
}

/**
 * The item whose condition check failed, from `error` (the request asked for
 * `ReturnValuesOnConditionCheckFailure: ALL_OLD`), or `undefined` when `error` is another failure.
 * DynamoDB hands the old item back with the failure; an endpoint that does not (dynalite, older emulators),
 * or a failure on an item that does not exist, leaves it out: then the item is read, strongly consistent,
 * which costs the round trip the option saves. The read may see a later version than the one the
 * condition saw; every caller decides from what it reads and never writes on that decision alone.
 *
 * @returns `{ item }` with `item` `undefined` when there is no item, or `undefined` when `error` is not
 *   a failed condition
 */
export async function failedConditionItem(
  error: unknown,
  client: DynamoDBClient,
  table: string,
  key: Item,
): Promise<{ readonly item: Item | undefined } | undefined> {
  if (!(error instanceof ConditionalCheckFailedException)) return undefined;
  if (error.Item !== undefined) return { item: error.Item };
  const read = await client.send(new GetItemCommand({ TableName: table, Key: key, ConsistentRead: true }));
  return { item: read.Item };
}
