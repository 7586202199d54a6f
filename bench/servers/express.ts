/** Express 5 payments handler for the benchmark, bare or behind `retrysafe/express`. */
import express from 'express';
import type { AddressInfo } from 'node:net';
import { idempotency } from '../../src/http/express.js';
import { charge, countRequests, snapshot, type BenchApp } from './app.js';

export async function startExpress(bench: BenchApp): Promise<number> {
  if (bench.minimalLayer === true) throw new TypeError('the minimal layer is Fastify only');
  const app = express();
  if (bench.receiver) app.use(idempotency({ receiver: bench.receiver }));
  app.use(express.json());
  app.post('/payments', (req, res, next) => {
    const body = req.body as { amount?: number };
    (bench.roundTrips?.() ?? Promise.resolve()).then(() => res.status(201).json(charge(body.amount)), next);
  });
  app.get('/__stats', (_req, res) => {
    res.json(snapshot());
  });
  const server = app.listen(0, '127.0.0.1');
  countRequests(server);
  await new Promise<void>((resolve) => server.once('listening', resolve));
  return (server.address() as AddressInfo).port;
}
