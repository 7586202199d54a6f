/**
 * The cost of the receiver's observability: CPU time per request through Fastify (`fastify.inject`, in
 * process, memory store) with the OpenTelemetry API's no-op (no SDK), with an SDK MeterProvider (an
 * in-memory reader), and with a MeterProvider plus a TracerProvider (spans to an in-memory exporter).
 * The three builds run in alternating rounds so the machine's noise spreads over all of them; the figure is
 * the median of the rounds' CPU microseconds (user + system) per request.
 *
 * Run: `npx tsx bench/observability.ts [rounds] [requests-per-round]`
 */
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import Fastify, { type FastifyInstance } from 'fastify';
import { createReceiver, type PlainReceiverOptions } from '../src/receiver.js';
import { idempotency } from '../src/http/fastify.js';
import { createMemoryStore } from '../src/stores/memory.js';

class OnDemandReader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

type Build = 'no-op' | 'metrics' | 'metrics+traces';

async function app(build: Build): Promise<FastifyInstance> {
  const options: Partial<PlainReceiverOptions> = {};
  if (build !== 'no-op') Object.assign(options, { meterProvider: new MeterProvider({ readers: [new OnDemandReader()] }) });
  if (build === 'metrics+traces') {
    const spans = new InMemorySpanExporter();
    // Keep memory flat: the exporter is emptied as it goes.
    setInterval(() => spans.reset(), 200).unref();
    Object.assign(options, { tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }) });
  }
  const fastify = Fastify();
  await fastify.register(idempotency, { receiver: createReceiver({ store: createMemoryStore(), ...options }) });
  fastify.post('/payments', () => ({ id: 'pay_1', status: 'succeeded' }));
  await fastify.ready();
  return fastify;
}

let sequence = 0;
/** CPU microseconds per request: half new keys (executed), half replays of them. */
async function round(fastify: FastifyInstance, requests: number): Promise<number> {
  const started = process.cpuUsage();
  for (let i = 0; i < requests / 2; i++) {
    const key = `k-${++sequence}`;
    for (let copy = 0; copy < 2; copy++) {
      const res = await fastify.inject({
        method: 'POST',
        url: '/payments',
        headers: { 'idempotency-key': key, 'content-type': 'application/json' },
        payload: '{"amount":100}',
      });
      if (res.statusCode !== 200) throw new Error(`unexpected ${res.statusCode}`);
    }
  }
  const used = process.cpuUsage(started);
  return (used.user + used.system) / requests;
}

const rounds = Number(process.argv[2] ?? 15);
const requests = Number(process.argv[3] ?? 4000);
const builds: Build[] = ['no-op', 'metrics', 'metrics+traces'];
const apps = new Map<Build, FastifyInstance>();
for (const build of builds) apps.set(build, await app(build));
for (const build of builds) await round(apps.get(build)!, 1000); // warm-up
const results = new Map<Build, number[]>(builds.map((b) => [b, []]));
for (let r = 0; r < rounds; r++) {
  // Rotate the order each round so no build always runs first.
  for (const build of [...builds.slice(r % 3), ...builds.slice(0, r % 3)]) results.get(build)!.push(await round(apps.get(build)!, requests));
}
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const base = median(results.get('no-op')!);
for (const build of builds) {
  const m = median(results.get(build)!);
  console.log(`${build.padEnd(15)} ${m.toFixed(1)} µs CPU/request  (${(((m - base) / base) * 100).toFixed(1)}% vs no-op)`);
}
for (const app of apps.values()) await app.close();
