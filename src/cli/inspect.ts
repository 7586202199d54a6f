/**
 * `retrysafe inspect --store URL [--scope S] KEY`: prints one idempotency record as JSON — its state
 * (`indeterminate` for a record `retrysafe gateway` holds because its outcome is unknown; a saga's status,
 * `compensating`, `compensation_failed` or `compensated`, for a multi-phase operation whose phase failed terminally),
 * lease, times (ISO 8601, UTC), recovery point (decoded when a phase runner wrote it) and saved response,
 * whose body is shown as text when it is valid UTF-8, else as base64.
 *
 * Exit codes: 0 printed; 1 no such record (or the store failed); 2 usage error.
 *
 * @module
 */
import type { Command } from 'commander';
import type { IdempotencyRecord } from '../core/record.js';
import { decodeRecoveryPoint } from '../phases/recovery-point.js';
import { indeterminateMarkOf } from '../gateway/indeterminate.js';
import { sagaStatusOf } from '../phases/saga.js';
import { storeFlag } from './store-flag.js';
import { loadPeer } from './peer.js';
import type { StoreTarget } from '../store-url.js';

interface InspectFlags {
  readonly store: StoreTarget;
  readonly scope: string;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The JSON view of a record that `inspect` prints: times as ISO 8601 strings, the recovery point decoded
 * into `{ plan, phase, input, state }` when it is one a phase runner wrote (else the raw text), and the
 * response body as `{ encoding: 'utf8' | 'base64', data }`.
 */
export function recordView(record: IdempotencyRecord): Record<string, unknown> {
  const iso = (ms: number): string => new Date(ms).toISOString();
  const point = record.recoveryPoint === undefined ? undefined : (decodeRecoveryPoint(record.recoveryPoint) ?? record.recoveryPoint);
  return {
    scope: record.scope,
    key: record.key,
    // A record the gateway holds (its outcome unknown) is in progress to the store, indeterminate to a reader.
    state: indeterminateMarkOf(record) === undefined ? (sagaStatusOf(record) ?? record.state) : 'indeterminate',
    fingerprint: record.fingerprint,
    leaseToken: record.leaseToken,
    leaseExpiresAt: iso(record.leaseExpiresAt),
    createdAt: iso(record.createdAt),
    ...(record.completedAt !== undefined && { completedAt: iso(record.completedAt) }),
    expiresAt: iso(record.expiresAt),
    ...(point !== undefined && { recoveryPoint: point }),
    ...(record.response !== undefined && {
      response: {
        status: record.response.status,
        headers: record.response.headers,
        body: bodyView(record.response.body),
      },
    }),
  };
}

function bodyView(body: Uint8Array): { encoding: 'utf8' | 'base64'; data: string } {
  try {
    return { encoding: 'utf8', data: strictUtf8.decode(body) };
  } catch {
    return { encoding: 'base64', data: Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('base64') };
  }
}

/** Adds the `inspect` command to `program`. */
export function register(program: Command): void {
  program
    .command('inspect')
    .description('Print the idempotency record of KEY as JSON.')
    .argument('<key>', 'the idempotency key, exactly as the client sent it')
    .requiredOption('--store <url>', 'idempotency store, e.g. sqlite:./idempotency.db', storeFlag)
    .option('--scope <scope>', 'the scope (tenant/principal) the key lives in', '')
    .addHelpText('after', '\nExit codes: 0 printed, 1 no such record (or the store failed), 2 usage error.')
    .action(async (key: string, flags: InspectFlags) => {
      const opened = await loadPeer(() => flags.store.open('existing'));
      try {
        const record = await opened.store.get(flags.scope, key);
        if (record === undefined) {
          process.stderr.write(`retrysafe: no record for key ${JSON.stringify(key)} in scope ${JSON.stringify(flags.scope)}\n`);
          process.exitCode = 1;
          return;
        }
        process.stdout.write(`${JSON.stringify(recordView(record), null, 2)}\n`);
      } finally {
        await opened.store.close();
      }
    });
}
