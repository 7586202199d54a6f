/**
 * `retrysafe demo`: proves, on real HTTP traffic with real faults, that every retried payment is charged
 * exactly once. See `demo/run.ts` for the run and `demo/report.ts` for the verdict.
 *
 * Exit codes: 0 when no payment was charged twice or lost and every key's answers were identical; 1
 * otherwise (or when the server could not run); 2 for a usage error.
 *
 * @module
 */
import { InvalidArgumentError, type Command } from 'commander';
import { MIN_PAYMENTS } from './demo/plan.js';
import { formatReport } from './demo/report.js';
import { formatOrdersReport } from './demo/orders/report.js';
import { runOrders } from './demo/orders/run.js';
import { ServiceUnavailableError } from './demo/orders/unavailable.js';
import { runDemo } from './demo/run.js';
import { parseStoreUrl, StoreUrlError } from './store-url.js';

interface DemoFlags {
  readonly payments: number;
  readonly concurrency: number;
  readonly seed?: number;
  readonly store?: string;
  readonly json?: boolean;
  readonly unsafe?: boolean;
  readonly scenario: 'payments' | 'orders';
  readonly orders: number;
  readonly amqp?: string;
}

/** Adds the `demo` command to `program`. */
export function register(program: Command): void {
  program
    .command('demo')
    .description(
      'Run a payments API (Express + retrysafe, by default on SQLite in a temp directory) in a child process and hit it with ' +
        'retrying clients through lost replies, client timeouts, concurrent duplicates and server crashes; ' +
        'report double charges (must be 0) and lost payments (must be 0).',
    )
    .option('--payments <n>', `logical payments (at least ${MIN_PAYMENTS})`, integer('--payments', MIN_PAYMENTS, 1_000_000), 240)
    .option('--concurrency <n>', 'payments in flight at once', integer('--concurrency', 1, 256), 12)
    .option('--seed <n>', 'seed of the fault plan (0..4294967295; printed, so a run can be repeated)', integer('--seed', 0, 0xffffffff))
    .option(
      '--store <url>',
      'idempotency store: sqlite:PATH, sqlite::memory:, memory:, postgres://… or redis://… (default: SQLite in a temp dir)',
      storeUrl,
    )
    .option('--json', 'print the report as JSON')
    .option('--unsafe', 'serve WITHOUT the idempotency middleware, to see what the same traffic does without retrysafe (exits 1)')
    .option('--scenario <name>', 'payments (HTTP only) or orders (HTTP → outbox → RabbitMQ → inbox; needs PostgreSQL and RabbitMQ)', scenario, 'payments')
    .option('--orders <n>', `orders scenario: logical orders (at least ${MIN_PAYMENTS})`, integer('--orders', MIN_PAYMENTS, 100_000), 100)
    .option('--amqp <url>', 'orders scenario: RabbitMQ URL (default amqp://guest:guest@127.0.0.1:5672)')
    .addHelpText(
      'after',
      [
        '',
        'Stores:',
        '  sqlite:PATH        transactional: the charge row, the claim and the saved response commit together.',
        '  postgres://…       transactional: the charges go to a schema of this run (retrysafe_demo_<run>, dropped',
        '                     afterwards) and are written through the request\'s transaction; the claim commits',
        '                     apart, so in-flight duplicates get 409 at once. The records go to schema "retrysafe"',
        '                     (or the one ?schema=NAME names; redis://…?prefix=NAME likewise picks the key prefix).',
        '  redis://…          plain: the records in Redis, the charges in a SQLite file. Only the crash after the',
        '                     record is saved is injected, once the payments in flight have saved theirs: a crash',
        '                     between a charge and its record re-executes the payment once the lease expires',
        '                     (docs/redis.md), and the report says so.',
        '  memory:, sqlite::memory:  the records live in the server process, so no crash is injected.',
        '',
        'Scenario orders (--scenario orders): POST /orders writes the order and an order.placed outbox row in one',
        'transaction (Express + retrysafe, PostgreSQL transactional); a relay process publishes to RabbitMQ; a',
        'consumer process charges each order once through the inbox. Faults on every hop: lost replies, client',
        'timeouts and duplicate bursts on HTTP; the relay SIGKILLed after the confirm, before marking sent;',
        'duplicate deliveries; the consumer SIGKILLed mid-handler and after commit before ack. --store must be',
        'postgres://… (default postgres://postgres@127.0.0.1:5432/test); a per-run schema, exchange and queue are',
        'created and removed. --unsafe runs the consumer WITHOUT the inbox. Exit 2 when a service is missing.',
        '',
        'Exit codes: 0 passed, 1 a payment was charged twice or lost (or the run failed), 2 usage error.',
      ].join('\n'),
    )
    .action(async (flags: DemoFlags) => {
      if (flags.scenario === 'orders') {
        await ordersAction(flags);
        return;
      }
      const report = await runDemo({
        payments: flags.payments,
        concurrency: flags.concurrency,
        unsafe: flags.unsafe === true,
        ...(flags.seed !== undefined && { seed: flags.seed }),
        ...(flags.store !== undefined && { store: flags.store }),
      });
      process.stdout.write(flags.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
      process.exitCode = report.passed ? 0 : 1;
    });
}

async function ordersAction(flags: DemoFlags): Promise<void> {
  if (flags.store !== undefined && !/^postgres(ql)?:\/\//.test(flags.store)) {
    process.stderr.write('retrysafe demo: --scenario orders needs --store postgres://…\n');
    process.exitCode = 2;
    return;
  }
  try {
    const report = await runOrders({
      orders: flags.orders,
      concurrency: flags.concurrency,
      unsafe: flags.unsafe === true,
      ...(flags.seed !== undefined && { seed: flags.seed }),
      ...(flags.store !== undefined && { store: flags.store }),
      ...(flags.amqp !== undefined && { amqp: flags.amqp }),
    });
    process.stdout.write(flags.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatOrdersReport(report));
    process.exitCode = report.passed ? 0 : 1;
  } catch (error) {
    if (!(error instanceof ServiceUnavailableError)) throw error;
    process.stderr.write(`retrysafe demo: ${error.message}\n`);
    process.exitCode = 2;
  }
}

function scenario(text: string): 'payments' | 'orders' {
  if (text !== 'payments' && text !== 'orders') throw new InvalidArgumentError('--scenario must be payments or orders.');
  return text;
}

function integer(flag: string, min: number, max: number): (text: string) => number {
  return (text) => {
    const value = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
      throw new InvalidArgumentError(`${flag} must be an integer from ${min} to ${max}.`);
    }
    return value;
  };
}

function storeUrl(text: string): string {
  try {
    parseStoreUrl(text);
  } catch (error) {
    if (error instanceof StoreUrlError) throw new InvalidArgumentError(error.message);
    throw error;
  }
  return text;
}
