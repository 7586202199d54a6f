/**
 * The DynamoDB claim: one conditional `UpdateItem` for a new or expired key, answered with the standing
 * item (`ReturnValuesOnConditionCheckFailure: ALL_OLD`) when the condition fails; a second conditional
 * write only to take over an expired lease.
 *
 * @module
 */
import { UpdateItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { claimOf } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { failedConditionItem, namesIn } from './expression.js';
import { decodeItem, fenceOf, n, s, ttlSeconds, type Item } from './layout.js';
import type { DynamodbStoreConfig } from './config.js';

/**
 * Writes a fresh `in_progress` record, creating the item or replacing an expired one; the fence counter is
 * bumped in the same write. Everything a completed or multi-phase record held before (response, recovery
 * point) is removed, so an expired key is new again.
 */
const FRESH_UPDATE =
  'SET #scope = :scope, #key = :key, #fingerprint = :fingerprint, #state = :inProgress, #leaseToken = :token, ' +
  '#fence = if_not_exists(#fence, :zero) + :one, #leaseExpiresAt = :lease, #createdAt = :now, #expiresAt = :expires, #ttl = :ttl ' +
  'REMOVE #recoveryPoint, #status, #headers, #body, #completedAt';
const FRESH_CONDITION = 'attribute_not_exists(#pk) OR #expiresAt <= :now';

/**
 * Takes over an expired lease: a new token and lease, the fence bumped, creation time and recovery point
 * kept. Conditioned on the fence the failed fresh write saw, so of many takeovers of one lease one wins.
 */
const TAKEOVER_UPDATE = 'SET #leaseToken = :token, #fence = #fence + :one, #leaseExpiresAt = :lease, #expiresAt = :expires, #ttl = :ttl';
const TAKEOVER_CONDITION = '#fence = :fence AND #state = :inProgress AND #leaseExpiresAt <= :now AND #expiresAt > :now';

/**
 * Claims `input` on `config`'s table at `now` (the caller's clock: DynamoDB has none to offer), presenting
 * `token` as the lease token.
 *
 * One round trip for a new key, an expired one, and every refusal (the replay of a completed record, a
 * key in progress, another fingerprint): the failed condition hands back the standing item. Two for a
 * takeover. Why not one: a takeover keeps the record's creation time and recovery point while a fresh
 * record drops them, and an update expression cannot choose between the two by the item it meets.
 */
export async function claimOn(config: DynamodbStoreConfig, input: ClaimInput, token: string, now: number): Promise<ClaimResult> {
  const key = config.itemKey(input.scope, input.key);
  const leaseExpiresAt = now + input.leaseMs;
  const expiresAt = now + input.retentionMs;
  const ttl = n(ttlSeconds(Math.max(leaseExpiresAt, expiresAt), config.ttlGraceSeconds));
  // A takeover lost to another claimant is followed by one more look at the key; the loop ends when a
  // write wins or the standing record refuses.
  for (;;) {
    let standing: Item | undefined;
    try {
      await config.client.send(
        new UpdateItemCommand({
          TableName: config.table,
          Key: key,
          UpdateExpression: FRESH_UPDATE,
          ConditionExpression: FRESH_CONDITION,
          ExpressionAttributeNames: namesIn(config.names, FRESH_UPDATE, FRESH_CONDITION),
          ExpressionAttributeValues: {
            ':scope': s(input.scope),
            ':key': s(input.key),
            ':fingerprint': s(input.fingerprint),
            ':inProgress': s('in_progress'),
            ':token': s(token),
            ':zero': n(0),
            ':one': n(1),
            ':lease': n(leaseExpiresAt),
            ':now': n(now),
            ':expires': n(expiresAt),
            ':ttl': ttl,
          },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return { acquired: true, claim: claimOf(input, token, leaseExpiresAt, false) };
    } catch (error) {
      const failed = await failedConditionItem(error, config.client, config.table, key);
      if (failed === undefined) throw error;
      standing = failed.item;
    }
    // Gone between the write and the read: look again.
    if (standing === undefined) continue;
    const record = decodeItem(standing);
    const open = record.state === 'in_progress' && record.fingerprint === input.fingerprint && record.expiresAt > now;
    if (open && record.leaseToken === token) {
      // The owner's own claim again (its first reply was lost): it holds the lease, unchanged.
      return { acquired: true, claim: claimOf(input, token, record.leaseExpiresAt, false, record.recoveryPoint) };
    }
    if (!open || record.leaseExpiresAt > now) return { acquired: false, record };
    if (await takeOver(config, key, fenceOf(standing), { token, now, leaseExpiresAt, expiresAt, ttl })) {
      return { acquired: true, claim: claimOf(input, token, leaseExpiresAt, true, record.recoveryPoint) };
    }
  }
}

/** The conditional takeover write; `false` when another claim changed the item first. */
async function takeOver(
  config: DynamodbStoreConfig,
  key: Item,
  fence: number,
  lease: { token: string; now: number; leaseExpiresAt: number; expiresAt: number; ttl: AttributeValue },
): Promise<boolean> {
  try {
    await config.client.send(
      new UpdateItemCommand({
        TableName: config.table,
        Key: key,
        UpdateExpression: TAKEOVER_UPDATE,
        ConditionExpression: TAKEOVER_CONDITION,
        ExpressionAttributeNames: namesIn(config.names, TAKEOVER_UPDATE, TAKEOVER_CONDITION),
        ExpressionAttributeValues: {
          ':token': s(lease.token),
          ':one': n(1),
          ':lease': n(lease.leaseExpiresAt),
          ':expires': n(lease.expiresAt),
          ':ttl': lease.ttl,
          ':fence': n(fence),
          ':inProgress': s('in_progress'),
          ':now': n(lease.now),
        },
      }),
    );
    return true;
  } catch (error) {
    if ((error as { name?: unknown }).name === 'ConditionalCheckFailedException') return false;
    throw error;
  }
}
