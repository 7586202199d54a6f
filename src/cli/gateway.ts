/**
 * `retrysafe gateway --config gateway.yaml [--check]`: the Idempotency-Key reverse proxy in front of any
 * HTTP upstream (docs/gateway.md). `--check` validates the configuration and exits. Running, it reloads
 * the configuration on SIGHUP and when the file changes, and drains on SIGTERM and SIGINT.
 *
 * `retrysafe gateway resolve --store URL --scope S --key K (--release | --status N [--body-file F]
 * [--header name:value]…)`: resolves an indeterminate record — releases it (the request did not take
 * effect; the next retry sends it) or completes it with the response given (every retry replays it).
 *
 * Exit codes: 0 ran, valid, or resolved; 1 the record could not be resolved; 2 a bad configuration or
 * usage error, reported in one line.
 *
 * @module
 */
import { readFile } from 'node:fs/promises';
import { Option, type Command } from 'commander';
import { CliFailure } from './failure.js';
import { loadPeer } from './peer.js';
import { durationOption, integerFlag, storeFlag } from './store-flag.js';
import type { StoreTarget } from '../store-url.js';
import type { GatewayConfig } from '../gateway/config.js';

interface RunFlags {
  readonly config?: string;
  readonly check?: boolean;
}

interface ResolveFlags {
  readonly store: StoreTarget;
  readonly scope: string;
  readonly key: string;
  readonly release?: boolean;
  readonly status?: number;
  readonly bodyFile?: string;
  readonly header: readonly string[];
  readonly retention: number;
}

/** The configuration, or a one-line failure (exit 2) naming the file and the key. */
async function configFrom(path: string | undefined): Promise<GatewayConfig> {
  if (path === undefined) throw new CliFailure('gateway needs --config FILE (YAML or JSON; see docs/gateway.md)');
  const { GatewayConfigError, loadConfig } = await import('../gateway/config.js');
  try {
    return await loadConfig(path);
  } catch (error) {
    if (error instanceof GatewayConfigError) throw new CliFailure(error.message, 2, { cause: error });
    throw error;
  }
}

async function run(flags: RunFlags): Promise<void> {
  const config = await configFrom(flags.config);
  if (flags.check === true) {
    process.stdout.write(`retrysafe: ${config.file} is valid: ${config.routes.length} routes, ${config.upstreams.length} upstreams, scope ${config.scope.kind}\n`);
    return;
  }
  const { startGateway } = await import('../gateway/server.js');
  const gateway = await loadPeer(() => startGateway(config));
  const where = gateway.addresses.map((address) => `${address.address}:${address.port}`).join(', ');
  const admin = gateway.adminAddress === undefined ? '' : `, admin on ${gateway.adminAddress.address}:${gateway.adminAddress.port}`;
  process.stderr.write(`retrysafe gateway: listening on ${where}${admin}, store ${config.store.replace(/\/\/[^@/]*@/, '//***@')}\n`);
  const onHangup = (): void => void gateway.reload();
  process.on('SIGHUP', onHangup);
  await new Promise<void>((resolve) => {
    const stop = (): void => {
      process.removeListener('SIGTERM', stop);
      process.removeListener('SIGINT', stop);
      process.removeListener('SIGHUP', onHangup);
      process.stderr.write('retrysafe gateway: draining\n');
      void gateway.close().then(resolve, resolve);
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
}

function headerFlag(value: string, previous: readonly string[]): readonly string[] {
  return [...previous, value];
}

async function resolve(flags: ResolveFlags): Promise<void> {
  if ((flags.release === true) === (flags.status !== undefined)) throw new CliFailure('gateway resolve needs exactly one of --release and --status N');
  const headers: Record<string, string> = {};
  for (const header of flags.header) {
    const at = header.indexOf(':');
    if (at <= 0) throw new CliFailure(`--header must be name:value, got ${JSON.stringify(header)}`);
    const name = header.slice(0, at).trim().toLowerCase();
    if (name === 'set-cookie') throw new CliFailure('--header set-cookie is never saved for replay');
    headers[name] = header.slice(at + 1).trim();
  }
  const body = flags.bodyFile === undefined ? new Uint8Array(0) : await readFile(flags.bodyFile);
  const { resolveIndeterminate, ResolveRefusedError } = await import('../gateway/resolve.js');
  const opened = await loadPeer(() => flags.store.open('existing'));
  try {
    const resolution = flags.status === undefined ? { kind: 'release' as const } : { kind: 'complete' as const, response: { status: flags.status, headers, body }, retentionMs: flags.retention };
    await resolveIndeterminate(opened.store, flags.scope, flags.key, resolution);
    process.stdout.write(`retrysafe: ${resolution.kind === 'release' ? 'released' : `completed with status ${flags.status}`}: scope ${JSON.stringify(flags.scope)} key ${JSON.stringify(flags.key)}\n`);
  } catch (error) {
    if (error instanceof ResolveRefusedError) throw new CliFailure(error.message, 1, { cause: error });
    throw error;
  } finally {
    await opened.store.close();
  }
}

/** Adds the `gateway` command (and `gateway resolve`) to `program`. */
export function register(program: Command): void {
  const gateway = program
    .command('gateway')
    .description('Run the Idempotency-Key reverse proxy in front of any HTTP upstream (docs/gateway.md).')
    .option('--config <file>', 'the configuration file, YAML or JSON')
    .option('--check', 'validate the configuration and exit')
    .addHelpText('after', '\nSIGHUP or a change of the file reloads the configuration; SIGTERM drains and exits.\nExit codes: 0 ran or valid, 2 a bad configuration or usage error.')
    .action((flags: RunFlags) => run(flags));
  gateway
    .command('resolve')
    .description('Resolve an indeterminate record: release it, or complete it with the response given.')
    .requiredOption('--store <url>', 'idempotency store, as in the configuration', storeFlag)
    .requiredOption('--scope <scope>', 'the record\'s scope, as the access log or `retrysafe inspect` shows it')
    .requiredOption('--key <key>', 'the idempotency key')
    .option('--release', 'the request did not take effect: release the key so the next retry sends it')
    .option('--status <n>', 'the request took effect with this status: complete the record', integerFlag('--status', 100, 599))
    .option('--body-file <file>', 'the response body (with --status)')
    .addOption(new Option('--header <name:value>', 'a response header to replay (with --status); repeatable').argParser(headerFlag).default([]))
    .addOption(durationOption('--retention <duration>', 'how long the completed record is replayed, e.g. 24h', '24h'))
    .addHelpText('after', '\nExit codes: 0 resolved, 1 no indeterminate record or it changed meanwhile, 2 usage error.')
    .action((flags: ResolveFlags) => resolve(flags));
}
