/**
 * `retrysafe demo`: proves, on real HTTP traffic with real faults, that every retried payment is charged
 * exactly once (`--scenario payments`, see `demo/payments/run.ts`) and that every order is charged once
 * across HTTP, an outbox, RabbitMQ or Kafka (`--broker`) and an inbox (`--scenario orders`, see
 * `demo/orders/run.ts`), and that `retrysafe gateway` in front of a Python service executes every payment
 * once through upstream resets, timeouts and gateway crashes (`--scenario gateway`, see
 * `demo/gateway/run.ts`). The demo and its drivers are loaded when the command runs.
 *
 * Exit codes: 0 when no payment (or order) was charged twice or lost and every key's answers were
 * identical; 1 otherwise (or when the server could not run); 2 for a usage error, a store or broker that
 * cannot be reached or a driver package that is not installed (one line naming it); 130 when interrupted
 * (Ctrl-C), 143 on SIGTERM, after removing what the run created.
 *
 * @module
 */
import { InvalidArgumentError, type Command } from 'commander';
import type { StoreTarget } from '../store-url.js';
import { CliFailure, EXIT_USAGE } from './failure.js';
import { loadPeer } from './peer.js';
import { integerFlag, storeFlag } from './store-flag.js';

/** Fewest logical payments (or orders) a run takes; the fault plan needs room for every kind of fault. */
const MIN_OPERATIONS = 10;

/** Exit codes after Ctrl-C (SIGINT) and SIGTERM, as shells report a process ended by that signal. */
const EXIT_INTERRUPTED = { SIGINT: 130, SIGTERM: 143 } as const;

/** The exit code of a run that `signal` (aborted with the signal's name) interrupted. */
function interruptedExit(signal: AbortSignal): number {
  return signal.reason === 'SIGTERM' ? EXIT_INTERRUPTED.SIGTERM : EXIT_INTERRUPTED.SIGINT;
}

interface DemoFlags {
  readonly payments: number;
  readonly concurrency: number;
  readonly seed?: number;
  readonly store?: StoreTarget;
  readonly json?: boolean;
  readonly unsafe?: boolean;
  readonly scenario: Scenario;
  readonly orders: number;
  readonly broker: BrokerName;
  readonly amqp?: string;
}

/** The scenarios `--scenario` takes. */
type Scenario = 'payments' | 'orders' | 'gateway';

/** Flags that belong to some scenarios only, and those scenarios. */
const SCENARIO_FLAGS: readonly (readonly [option: 'payments' | 'orders' | 'broker' | 'amqp' | 'unsafe', scenarios: readonly Scenario[]])[] = [
  ['payments', ['payments', 'gateway']],
  ['orders', ['orders']],
  ['broker', ['orders']],
  ['amqp', ['orders']],
  ['unsafe', ['payments', 'orders']],
];

/** The brokers `--broker` takes; the type is repeated here so `--help` loads no demo module. */
type BrokerName = 'rabbitmq' | 'kafka';

/** Adds the `demo` command to `program`. */
export function register(program: Command): void {
  program
    .command('demo')
    .description(
      'Run a payments API (Express + retrysafe, by default on SQLite in a temp directory) in a child process and hit it with ' +
        'retrying clients through lost replies, client timeouts, concurrent duplicates and server crashes; ' +
        'report double charges (must be 0) and lost payments (must be 0).',
    )
    .option('--payments <n>', `payments scenario: logical payments (at least ${MIN_OPERATIONS})`, integerFlag('--payments', MIN_OPERATIONS, 1_000_000), 240)
    .option('--concurrency <n>', 'payments in flight at once', integerFlag('--concurrency', 1, 256), 12)
    .option('--seed <n>', 'seed of the fault plan (0..4294967295; printed, so a run can be repeated)', integerFlag('--seed', 0, 0xffffffff))
    .option(
      '--store <url>',
      'idempotency store: sqlite:PATH, sqlite::memory:, memory:, postgres://… or redis://… (default: SQLite in a temp dir)',
      storeFlag,
    )
    .option('--json', 'print the report as JSON')
    .option('--unsafe', 'serve WITHOUT the idempotency middleware, to see what the same traffic does without retrysafe (exits 1)')
    .option(
      '--scenario <name>',
      'payments (HTTP only), orders (HTTP → outbox → broker → inbox; needs PostgreSQL, and RabbitMQ unless --broker kafka) or gateway (a Python service behind retrysafe gateway; needs python3)',
      scenario,
      'payments',
    )
    .option('--orders <n>', `orders scenario: logical orders (at least ${MIN_OPERATIONS})`, integerFlag('--orders', MIN_OPERATIONS, 100_000), 100)
    .option('--broker <name>', 'orders scenario: rabbitmq, or kafka (librdkafka\'s mock cluster of 3 brokers inside the demo; needs @confluentinc/kafka-javascript)', broker, 'rabbitmq')
    .option('--amqp <url>', 'orders scenario on rabbitmq: RabbitMQ URL (default amqp://guest:guest@127.0.0.1:5672)')
    .addHelpText(
      'after',
      [
        '',
        'Stores:',
        '  sqlite:PATH        transactional: the charge row, the claim and the saved response commit together.',
        '  postgres://…       transactional: the records and the charges go to a schema of this run',
        '                     (retrysafe_demo_<run>, dropped afterwards, also on Ctrl-C); the charges are written',
        '                     through the request\'s transaction; the claim commits apart, so in-flight duplicates',
        '                     get 409 at once.',
        '  redis://…          plain: the records in Redis under a key prefix of this run (retrysafe_demo_<run>,',
        '                     deleted afterwards, also on Ctrl-C), the charges in a SQLite file. Only the crash after the',
        '                     record is saved is injected, once the payments in flight have saved theirs: a crash',
        '                     between a charge and its record re-executes the payment once the lease expires',
        '                     (docs/redis.md), and the report says so.',
        '  memory:, sqlite::memory:  the records live in the server process, so no crash is injected.',
        '  --store takes no ?schema= or ?prefix= here: the run uses its own.',
        '',
        'Scenario orders (--scenario orders): POST /orders writes the order and an order.placed outbox row in one',
        'transaction (Express + retrysafe, PostgreSQL transactional); a relay process publishes to the broker; a',
        'consumer process charges each order once through the inbox. Faults on every hop: lost replies, client',
        'timeouts and duplicate bursts on HTTP; the relay SIGKILLed after the confirm, before marking sent;',
        'duplicate deliveries; the consumer SIGKILLed mid-handler and after commit before ack. --store must be',
        'postgres://… (default postgres://postgres@127.0.0.1:5432/test); a per-run schema is created and dropped.',
        '--unsafe runs the consumer WITHOUT the inbox. Exit 2 when a service or a driver package is missing.',
        '  --broker rabbitmq  (default) the RabbitMQ at --amqp, with a per-run exchange and queue (deleted afterwards).',
        '  --broker kafka     no Kafka server: librdkafka\'s mock cluster (3 brokers) runs inside the demo, with a',
        '                     per-run topic and group. The relay waits for acks=all; the consumer is a group of two',
        '                     members, one SIGKILLed mid-handler and one after commit before its offset is stored,',
        '                     whose records the group reads again (docs/kafka.md).',
        '',
        'Scenario gateway (--scenario gateway): the example payments service in Python (examples/gateway/upstream.py)',
        'behind `retrysafe gateway` (a child process, route with a reconcile hook, lease 3 s, upstream timeout 2 s),',
        'on --store (default SQLite in a temp dir). The upstream commits then resets the connection, or sleeps past',
        'the timeout: the outcome is indeterminate, the record held, and the retry resolved by the reconcile hook.',
        'Duplicate bursts, client timeouts, and the gateway SIGKILLed twice mid-request (once before the upstream',
        'commits, once after) and restarted. Passes with 0 double executions, 0 lost payments and 0 records left',
        'open. Exit 2 when python3 cannot be run, or examples/gateway/upstream.py is not there (a clone has it).',
        '',
        'Exit codes: 0 passed, 1 a payment was charged twice or lost (or the run failed), 2 usage error or a',
        'store or broker that cannot be reached, 130 interrupted (Ctrl-C), 143 on SIGTERM (what the run created is removed first).',
      ].join('\n'),
    )
    .action(async (flags: DemoFlags, command: Command) => {
      for (const [option, scenarios] of SCENARIO_FLAGS) {
        if (!scenarios.includes(flags.scenario) && command.getOptionValueSource(option) === 'cli') {
          throw new CliFailure(`--${option} applies to --scenario ${scenarios.join(' and ')} only, not to --scenario ${flags.scenario}`);
        }
      }
      const interrupt = new AbortController();
      const onSignal = (name: NodeJS.Signals): void => interrupt.abort(name);
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        if (flags.scenario === 'orders') await ordersAction(flags, interrupt.signal);
        else if (flags.scenario === 'gateway') await gatewayAction(flags, interrupt.signal);
        else await paymentsAction(flags, interrupt.signal);
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}

async function paymentsAction(flags: DemoFlags, signal: AbortSignal): Promise<void> {
  // The app is loaded here too, though it runs in the server process: a missing `express` is one line here.
  const [{ runDemo }, { formatReport }, { DemoInterruptedError }] = await loadPeer(() =>
    Promise.all([
      import('../demo/payments/run.js'),
      import('../demo/payments/report.js'),
      import('../demo/harness/interrupted.js'),
      import('../demo/payments/app.js'),
    ]),
  );
  if (flags.store !== undefined) ownNamespace(flags.store);
  try {
    // The run opens the store first, so one it cannot open is one line (StoreOpenError), not the child's stack trace.
    const report = await loadPeer(() => runDemo({
      payments: flags.payments,
      onProgress,
      concurrency: flags.concurrency,
      unsafe: flags.unsafe === true,
      signal,
      ...(flags.seed !== undefined && { seed: flags.seed }),
      ...(flags.store !== undefined && { store: flags.store.url }),
    }));
    process.stdout.write(flags.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
    process.exitCode = report.passed ? 0 : 1;
  } catch (error) {
    if (error instanceof DemoInterruptedError) throw new CliFailure(`demo ${error.message}`, interruptedExit(signal));
    throw error;
  }
}

async function ordersAction(flags: DemoFlags, signal: AbortSignal): Promise<void> {
  if (flags.store !== undefined && flags.store.scheme !== 'postgres' && flags.store.scheme !== 'postgresql') {
    throw new CliFailure('demo --scenario orders needs --store postgres://…');
  }
  if (flags.broker === 'kafka' && flags.amqp !== undefined) throw new CliFailure('--amqp applies to --broker rabbitmq only, not to --broker kafka');
  const [{ runOrders }, { formatOrdersReport }, { ServiceUnavailableError }, { DemoInterruptedError }] = await loadPeer(() =>
    Promise.all([
      import('../demo/orders/run.js'),
      import('../demo/orders/report.js'),
      import('../demo/harness/unavailable.js'),
      import('../demo/harness/interrupted.js'),
    ]),
  );
  // The broker's client package, named in one line when missing (run.js loads the module only when the run starts).
  await loadPeer<unknown>(() => (flags.broker === 'kafka' ? import('../demo/orders/kafka.js') : import('../demo/orders/rabbitmq.js')));
  try {
    const report = await runOrders({
      orders: flags.orders,
      onProgress,
      concurrency: flags.concurrency,
      unsafe: flags.unsafe === true,
      signal,
      ...(flags.seed !== undefined && { seed: flags.seed }),
      ...(flags.store !== undefined && { store: flags.store.driverUrl }),
      broker: flags.broker,
      ...(flags.amqp !== undefined && { amqp: flags.amqp }),
    });
    process.stdout.write(flags.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatOrdersReport(report));
    process.exitCode = report.passed ? 0 : 1;
  } catch (error) {
    if (error instanceof ServiceUnavailableError) throw new CliFailure(`demo: ${error.message}`, EXIT_USAGE);
    if (error instanceof DemoInterruptedError) throw new CliFailure(`demo ${error.message}`, interruptedExit(signal));
    throw error;
  }
}

async function gatewayAction(flags: DemoFlags, signal: AbortSignal): Promise<void> {
  const [{ runGatewayDemo }, { formatGatewayReport }, { UpstreamUnavailableError }, { DemoInterruptedError }] = await Promise.all([
    import('../demo/gateway/run.js'),
    import('../demo/gateway/report.js'),
    import('../demo/gateway/upstream.js'),
    import('../demo/harness/interrupted.js'),
  ]);
  if (flags.store !== undefined) ownNamespace(flags.store);
  try {
    // The run opens the store first, so one it cannot open is one line (StoreOpenError), not the gateway's.
    const report = await loadPeer(() => runGatewayDemo({
      payments: flags.payments,
      onProgress,
      concurrency: flags.concurrency,
      signal,
      ...(flags.seed !== undefined && { seed: flags.seed }),
      ...(flags.store !== undefined && { store: flags.store.url }),
    }));
    process.stdout.write(flags.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatGatewayReport(report));
    process.exitCode = report.passed ? 0 : 1;
  } catch (error) {
    if (error instanceof UpstreamUnavailableError) throw new CliFailure(`demo: ${error.message}`, EXIT_USAGE);
    if (error instanceof DemoInterruptedError) throw new CliFailure(`demo ${error.message}`, interruptedExit(signal));
    throw error;
  }
}

/**
 * Refuses a `--store` that names a schema or a key prefix: the payments and gateway demos keep their records
 * under `retrysafe_demo_<run>`, removed at the end.
 * @throws {@link CliFailure} (exit 2) naming the parameter
 */
function ownNamespace(target: StoreTarget): void {
  const query = target.url.includes('?') ? new URLSearchParams(target.url.slice(target.url.indexOf('?') + 1)) : undefined;
  const named = ['schema', 'prefix'].find((name) => query?.has(name) === true);
  if (named !== undefined) {
    throw new CliFailure(`demo keeps its records in a ${named} of its own (retrysafe_demo_<run>, removed afterwards): drop ?${named}= from --store`);
  }
}

/** The progress line every 2 s, on stderr (so `--json` output stays one document). */
function onProgress(line: string): void {
  process.stderr.write(`retrysafe demo: ${line}\n`);
}

function scenario(text: string): Scenario {
  if (text !== 'payments' && text !== 'orders' && text !== 'gateway') throw new InvalidArgumentError('--scenario must be payments, orders or gateway.');
  return text;
}

function broker(text: string): BrokerName {
  if (text !== 'rabbitmq' && text !== 'kafka') throw new InvalidArgumentError('--broker must be rabbitmq or kafka.');
  return text;
}

