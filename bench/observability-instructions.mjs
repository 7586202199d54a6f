// Instructions per request of the receiver's observability, counted by callgrind (valgrind), so the figure
// does not move with the machine's load the way CPU time does. One build per process: `noop` (the API
// without an SDK), `metrics` (an SDK MeterProvider with an in-memory reader) or `traces` (plus a
// BasicTracerProvider exporting spans to memory). The workload is half new keys, half replays of them,
// through `receiver.run` (`run`) or Fastify's `inject` (`inject`), on the memory store. Callgrind counts
// only the measured requests: instrumentation is switched on (`callgrind_control -i on`) once the warm-up
// requests have run, so neither start-up nor the JIT's warm-up is counted.
//
//   npm run build && node bench/observability-instructions.mjs <run|inject> <noop|metrics|traces> [warm] [measured]
//
// Defaults: 20,000 + 20,000 requests for `run`, 3,000 + 3,000 for `inject`. Needs valgrind; V8 runs with
// --single-threaded so no background compiler or GC thread adds its own count. Major GCs make `inject`
// counts move between runs (a 3,000-request window holds zero, one or two): compare medians of a few.
import { readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import process from 'node:process';
import { setInterval } from 'node:timers';
import { countAfterWarmUp, warmedUp } from './callgrind.mjs';

const [workload = 'run', build = 'metrics', warmArg, measuredArg] = process.argv.slice(2);
const warm = Number(warmArg ?? (workload === 'run' ? 20_000 : 3_000));
const measured = Number(measuredArg ?? warm);
if (!['run', 'inject'].includes(workload) || !['noop', 'metrics', 'traces'].includes(build)) {
  process.stderr.write('usage: node bench/observability-instructions.mjs <run|inject> <noop|metrics|traces> [warm] [measured]\n');
  process.exit(2);
}

if (process.env.RETRYSAFE_BENCH_SIGNAL === undefined) {
  // The parent: runs the workload under callgrind and prints instructions per measured request.
  const out = await countAfterWarmUp(import.meta.filename, process.argv.slice(2), { signalVariable: 'RETRYSAFE_BENCH_SIGNAL' });
  const totals = /^(?:summary|totals): (\d+)/m.exec(readFileSync(out, 'utf8'));
  rmSync(out, { force: true });
  if (!totals) throw new Error('no totals in the callgrind output');
  process.stdout.write(`${workload} ${build}: ${Math.round(Number(totals[1]) / measured)} instructions per request (${measured} measured after ${warm})\n`);
} else {
  // The workload, under callgrind.
  const root = join(import.meta.dirname, '..');
  const require = createRequire(join(root, 'package.json'));
  const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics');
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  class OnDemandReader extends MetricReader {
    onShutdown() {
      return Promise.resolve();
    }
    onForceFlush() {
      return Promise.resolve();
    }
  }
  const { createMemoryStore, createReceiver } = await import(join(root, 'dist/index.js'));
  const options = {};
  if (build !== 'noop') options.meterProvider = new MeterProvider({ readers: [new OnDemandReader()] });
  if (build === 'traces') {
    const spans = new InMemorySpanExporter();
    setInterval(() => spans.reset(), 200).unref();
    options.tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  }
  const receiver = createReceiver({ store: createMemoryStore(), ...options });
  let send;
  if (workload === 'run') {
    const fingerprint = 'f'.repeat(64);
    send = (key) => receiver.run({ scope: '', key, fingerprint }, () => Promise.resolve({ id: 'pay_1' }));
  } else {
    const { idempotency } = await import(join(root, 'dist/http/fastify.js'));
    const fastify = require('fastify')();
    await fastify.register(idempotency, { receiver });
    fastify.post('/payments', () => ({ id: 'pay_1', status: 'succeeded' }));
    await fastify.ready();
    send = async (key) => {
      const res = await fastify.inject({
        method: 'POST',
        url: '/payments',
        headers: { 'idempotency-key': key, 'content-type': 'application/json' },
        payload: '{"amount":100}',
      });
      if (res.statusCode !== 200) throw new Error(`unexpected ${res.statusCode}`);
    };
  }
  let sequence = 0;
  const requests = async (n) => {
    for (let i = 0; i < n / 2; i++) {
      const key = `k-${++sequence}`;
      await send(key);
      await send(key);
    }
  };
  await requests(warm);
  await warmedUp(process.env.RETRYSAFE_BENCH_SIGNAL);
  await requests(measured);
  process.exit(0);
}
