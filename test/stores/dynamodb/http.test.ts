/**
 * The HTTP behaviour table (`test/http/scenarios.ts`) over the DynamoDB store on DynamoDB Local, through
 * the Hono adapter, plus duplicates spread over two clients of one table.
 */
import { Hono } from 'hono';
import { afterAll, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/hono.js';
import { createDynamodbStore } from '../../../src/stores/dynamodb/index.js';
import { dynamodbLocalForFile, dynamodbScenarioStore, storeOnTableWithoutTtl } from '../../support/dynamodb.js';
import { uniqueName } from '../../support/services.js';
import { honoDriver } from '../../http/hono-driver.js';
import { httpScenarios } from '../../http/scenarios.js';

const PREFIX = uniqueName('rs_ddb_http');
const local = await dynamodbLocalForFile();

if (local !== undefined) {
  afterAll(() => local.stop());

  httpScenarios(honoDriver, dynamodbScenarioStore(local, `${PREFIX}_t`));

  describe('dynamodb store: HTTP behaviour across clients', () => {
    it('runs once for 20 parallel duplicates over two clients: the rest get 409 or the replay', async () => {
      const table = `${PREFIX}_two`;
      await (await storeOnTableWithoutTtl(local, table, undefined)).close();
      const state = { runs: 0 };
      const apps = [local.newClient(), local.newClient()].map((client) => {
        const hono = new Hono();
        hono.use(idempotency({ receiver: createReceiver({ store: createDynamodbStore({ client, table }) }) }));
        hono.post('/payments', async () => {
          state.runs++;
          await new Promise((resolve) => setTimeout(resolve, 50));
          return new Response('{"id":1}', { status: 201, headers: { 'content-type': 'application/json' } });
        });
        return hono;
      });
      const post = async (i: number): Promise<Response> =>
        await (apps[i % 2] as Hono).request('/payments', { method: 'POST', headers: { 'idempotency-key': '"hot"', 'content-type': 'application/json' }, body: '{"amount":1}' });
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => post(i)));
      expect(state.runs).toBe(1);
      // Each duplicate is refused while the original runs (409), or replayed once it completed: on a busy
      // machine a claim may reach DynamoDB Local only after the completion.
      const fresh = responses.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === null);
      expect(fresh).toHaveLength(1);
      for (const r of responses) if (r !== fresh[0]) expect(r.status === 409 || r.headers.get('idempotent-replayed') === 'true').toBe(true);
      const replay = await post(1);
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await replay.text()).toBe('{"id":1}');
      expect(state.runs).toBe(1);
    });
  });
}
