/** Fastify 5 payments handler for the benchmark: bare, behind `retrysafe/fastify`, or behind the minimal layer. */
import Fastify from 'fastify';
import { idempotency } from '../../src/http/fastify.js';
import { charge, countRequests, snapshot, type BenchApp } from './app.js';
import { addMinimalLayer } from './minimal-layer.js';

export async function startFastify(bench: BenchApp): Promise<number> {
  const app = Fastify({ logger: false });
  if (bench.receiver) await app.register(idempotency, { receiver: bench.receiver });
  if (bench.minimalLayer === true) addMinimalLayer(app);
  app.post('/payments', async (request, reply) => {
    await bench.roundTrips?.();
    return reply.code(201).send(charge((request.body as { amount?: number }).amount));
  });
  app.get('/__stats', () => snapshot());
  await app.listen({ port: 0, host: '127.0.0.1' });
  countRequests(app.server);
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}
