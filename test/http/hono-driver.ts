/** Hono driver for the shared HTTP scenarios, with `app.request()` as the client. */
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { idempotency } from '../../src/http/hono.js';
import { headerEntries, type Driver, type TestClient, type TestResponse } from '../support/http.js';

export const honoDriver: Driver = {
  name: 'hono',
  detectsThrows: true,
  start(options, handler) {
    const app = new Hono();
    app.use(idempotency({ ...options, scope: (c) => c.req.header('x-tenant') ?? '' }));
    app.all('*', async (c) => {
      const reply = await handler({ method: c.req.method, path: c.req.path, idempotency: c.get('idempotency') });
      const headers = new Headers();
      for (const [name, value] of headerEntries(reply)) {
        for (const one of [value].flat()) headers.append(name, one);
      }
      if (reply.chunks) {
        const chunks = [...reply.chunks];
        const stream = new ReadableStream<Uint8Array>({
          pull(controller) {
            const next = chunks.shift();
            if (next === undefined) controller.close();
            else controller.enqueue(next);
          },
        });
        return new Response(stream, { status: reply.status, headers });
      }
      return new Response(reply.body ?? null, { status: reply.status, headers });
    });
    app.onError((error, c) => (error instanceof HTTPException ? error.getResponse() : c.json({ error: error.message }, 500)));
    return Promise.resolve(fetchClient((request) => app.request(request)));
  },
};

/** A client over any fetch-style handler. */
export function fetchClient(fetch: (request: Request) => Response | Promise<Response>): TestClient {
  return {
    async request(req): Promise<TestResponse> {
      const request = new Request(`http://localhost${req.path}`, {
        method: req.method,
        headers: req.headers ?? {},
        ...(req.body !== undefined && { body: req.body }),
      });
      const res = await fetch(request);
      const body = Buffer.from(await res.arrayBuffer());
      return {
        status: res.status,
        header: (name) => res.headers.get(name) ?? undefined,
        cookies: res.headers.getSetCookie(),
        body,
      };
    },
    close: () => Promise.resolve(),
  };
}
