/** Express 5 and Express 4 drivers for the shared HTTP scenarios, with supertest as the client. */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type express from 'express';
import type { Express, NextFunction, Request, Response } from 'express';
import express4 from 'express4';
import request from 'supertest';
import { idempotency } from '../../src/http/express.js';
import { headerEntries, type Driver, type TestClient, type TestRequest, type TestResponse } from '../support/http.js';

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

/** A supertest client over `server`, already listening, reading raw body bytes; `close` shuts the server down. */
export function serverClient(server: Server, close: () => Promise<void>): TestClient {
  return {
    async request(req: TestRequest): Promise<TestResponse> {
      const agent = request(server) as unknown as Record<string, (path: string) => request.Test>;
      const method = agent[req.method.toLowerCase()];
      if (!method) throw new Error(`no supertest method for ${req.method}`);
      let test = method(req.path);
      for (const [name, value] of Object.entries(req.headers ?? {})) test = test.set(name, value);
      if (req.body !== undefined) test = test.send(typeof req.body === 'string' ? req.body : Buffer.from(req.body));
      const res = await test.buffer(true).parse((incoming, callback) => {
        const chunks: Buffer[] = [];
        incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
        incoming.on('end', () => callback(null, Buffer.concat(chunks)));
      });
      const headers = res.headers as Record<string, string | string[] | undefined>;
      return {
        status: res.status,
        header: (name) => {
          const value = headers[name];
          return Array.isArray(value) ? value.join(', ') : value;
        },
        cookies: [headers['set-cookie'] ?? []].flat(),
        body: Buffer.isBuffer(res.body) ? res.body : Buffer.alloc(0),
      };
    },
    close,
  };
}
