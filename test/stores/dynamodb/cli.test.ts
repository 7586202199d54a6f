/**
 * `dynamodb://` store URLs and `retrysafe migrate --store dynamodb://…` against DynamoDB Local: the CLI
 * creates the table with TTL on, a second run finds it, and `open('existing')` refuses a missing table.
 */
import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { parseStoreUrl, StoreOpenError, StoreUrlError } from '../../../src/store-url.js';
import { dynamodbLocalForFile, LOCAL_AWS_ENV } from '../../support/dynamodb.js';
import { runCli } from '../../support/run-cli.js';
import { uniqueName } from '../../support/services.js';

const PREFIX = uniqueName('rs_ddb_cli');
const local = await dynamodbLocalForFile();

describe('dynamodb:// store URLs', () => {
  it('parse the table as written and refuse what they cannot name', () => {
    expect(parseStoreUrl('dynamodb://My.Table-1?region=eu-west-1').scheme).toBe('dynamodb');
    expect(parseStoreUrl('dynamodb://').durable).toBe(true);
    expect(() => parseStoreUrl('dynamodb://x?region=a')).toThrow(StoreUrlError);
    expect(() => parseStoreUrl('dynamodb://table?colour=red')).toThrow(/unknown parameter "colour"/);
    expect(() => parseStoreUrl('dynamodb://table?endpoint=localhost:8000')).toThrow(/endpoint/);
    expect(() => parseStoreUrl('dynamodb:table')).toThrow(StoreUrlError);
  });
});

if (local !== undefined) {
  Object.assign(process.env, LOCAL_AWS_ENV);
  afterAll(() => local.stop());

  describe('retrysafe migrate --store dynamodb://', () => {
    it('creates the table with TTL on, and finds it on a second run', { timeout: 60_000 }, async () => {
      const table = `${PREFIX}_migrate`;
      const url = `dynamodb://${table}?endpoint=${encodeURIComponent(local.endpoint)}&region=us-east-1`;
      const first = await runCli(['migrate', '--store', url]);
      expect(first.stderr).toBe('');
      expect(first.stdout).toBe(`retrysafe: DynamoDB table "${table}" created, TTL on attribute "ttl"\n`);
      expect(first.code).toBe(0);
      const second = await runCli(['migrate', '--store', url]);
      expect(second.stdout).toContain('already there');
      expect(second.code).toBe(0);
      const described = await local.client.send(new DescribeTableCommand({ TableName: table }));
      expect(described.Table?.KeySchema?.map((key) => key.AttributeName)).toEqual(['pk', 'sk']);
      const ttl = await local.client.send(new DescribeTimeToLiveCommand({ TableName: table }));
      expect(ttl.TimeToLiveDescription).toEqual({ TimeToLiveStatus: 'ENABLED', AttributeName: 'ttl' });
    });

    it('exits 2 in one line when the endpoint does not answer', { timeout: 60_000 }, async () => {
      const result = await runCli(['migrate', '--store', 'dynamodb://nobody?endpoint=http%3A%2F%2F127.0.0.1%3A9&region=us-east-1']);
      expect(result.code).toBe(2);
      expect(result.stderr.trim().split('\n')).toHaveLength(1);
      expect(result.stderr).toContain('dynamodb://nobody');
    });
  });

  describe('opening a dynamodb:// target', () => {
    it("refuses a missing table with 'existing', creates it with 'create', and the store works", async () => {
      const table = `${PREFIX}_open`;
      const url = `dynamodb://${table}?endpoint=${encodeURIComponent(local.endpoint)}&region=us-east-1&sortKey=&partitionKey=id`;
      await expect(parseStoreUrl(url).open('existing')).rejects.toThrow(StoreOpenError);
      const opened = await parseStoreUrl(url).open('create');
      expect(opened).toMatchObject({ scheme: 'dynamodb', transactional: false });
      const claimed = await opened.store.claim({ scope: 's', key: 'k', fingerprint: 'f', leaseMs: 1_000, retentionMs: 60_000 });
      expect(claimed.acquired).toBe(true);
      expect((await opened.store.get('s', 'k'))?.state).toBe('in_progress');
      await opened.store.close();
      const again = await parseStoreUrl(url).open('existing');
      expect((await again.store.get('s', 'k'))?.state).toBe('in_progress');
      await again.store.close();
      const described = await local.client.send(new DescribeTableCommand({ TableName: table }));
      expect(described.Table?.KeySchema).toEqual([{ AttributeName: 'id', KeyType: 'HASH' }]);
    });
  });
}
