/** Express 5 and Express 4 drivers for the shared HTTP scenarios, with supertest as the client. */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type express from 'express';
import type { Express, NextFunction, Request, Response } from 'express';
import express4 from 'express4';
import { idempotency } from '../../src/http/express.js';
import { headerEntries, serverClient, type Driver, type TestClient } from '../support/http.js';

/** The subset of `express()` the drivers use; Express 4 and 5 share it. */
export type ExpressFactory = typeof express;
export const express4Factory = express4 as unknown as ExpressFactory;

export function expressDriver(name: string, factory: ExpressFactory): Driver {
  return {
    name,
    detectsThrows: false,
    start(options, handler) {
      const app = factory();
      app.use(idempotency({ ...options, scope: (req) => req.get('x-tenant') ?? '' }));
      // After the middleware: it has read the stream, and these must neither hang nor fail.
      app.use(factory.json());
      app.use(factory.text());
      app.use((req: Request, res: Response, next: NextFunction) => {
        handler({ method: req.method, path: req.path, idempotency: req.idempotency }).then((reply) => {
          res.status(reply.status);
          for (const [name, value] of headerEntries(reply)) res.setHeader(name, value);
          if (reply.chunks) {
            for (const chunk of reply.chunks) res.write(Buffer.from(chunk));
            res.end();
          } else if (reply.body === undefined) res.end();
          else res.send(typeof reply.body === 'string' ? reply.body : Buffer.from(reply.body));
        }, next);
      });
      app.use((error: Error & { status?: number }, _req: Request, res: Response, _next: NextFunction) => {
        res.status(error.status ?? 500).json({ error: error.message });
      });
      return supertestClient(app);
    },
  };
}

/** A supertest client over one listening server (so parallel requests share it), reading raw body bytes. */
export async function supertestClient(app: Express): Promise<TestClient> {
  const server: Server = createServer(app).listen(0, '127.0.0.1');
  await once(server, 'listening');
  return serverClient(server, () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))));
}
