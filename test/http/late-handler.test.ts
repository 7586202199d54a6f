/**
 * A handler that outruns its `maxExecutionMs`, in transactional mode: the middleware answers the 409
 * `idempotency-lease-lost` while the handler still runs, and the handler's late `res.setHeader()` /
 * `res.json()` (Express) or returned value (NestJS on Express) must neither throw into the app's error
 * handler nor reach the client, which has its answer already; nor when a `problem` shape that throws turns
 * that 409 into a late failure, which the app's error handler answers (Express) or Nest's 500 (NestJS).
 * Real SQLite store, real sockets.
 */
import 'reflect-metadata';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Logger, Post, Res, type ArgumentsHost, type INestApplication } from '@nestjs/common';
import express from 'express';
import type { NextFunction, Request, Response } from 'express';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { problemDetailsShape, type ProblemShape } from '../../src/core/problem.js';
import { idempotency } from '../../src/http/express.js';
import { createReceiver } from '../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';
import { express4Factory, type ExpressFactory } from './express-driver.js';
import { controller, startNest } from './nestjs-driver.js';
import type { TestResponse } from '../support/http.js';

const LEASE_MS = 150;

/** A problem shape with a bug: it has no answer for `idempotency-lease-lost`. */
const throwsOnLeaseLost: ProblemShape = (problem) => {
  if (problem.code === 'idempotency-lease-lost') throw new Error('problem shape bug');
  return problemDetailsShape(problem);
};

let dir: string;
let store: SqliteStore;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'retrysafe-late-'));
  store = createSqliteStore({ path: join(dir, 'db.sqlite') });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Resolves with `resolve` called from outside. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

const pay = (key: string): RequestInit => ({
  method: 'POST',
  headers: { 'idempotency-key': key, 'content-type': 'application/json' },
  body: '{"amount":100}',
});

describe.each<[string, ExpressFactory]>([
  ['express 5', express],
  ['express 4', express4Factory],
])('%s: a handler still running after the middleware answered', (_name, factory) => {
  let server: Server | undefined;
  afterEach(async () => {
    const closing = server;
    server = undefined;
    if (closing) await new Promise((resolve) => closing.close(resolve));
  });

  /**
   * An app whose handler writes only once the test opens `answered`, after the middleware answered (its
   * lease of LEASE_MS over, `maxExecutionMs` reached); its error handler records what reaches it.
   */
  async function lateWriter(problem?: typeof throwsOnLeaseLost): Promise<{ first: globalThis.Response; answer: () => Promise<void>; errors: unknown[]; lateThrew: () => unknown }> {
    const answered = gate();
    const lateWrite = gate();
    const errors: unknown[] = [];
    let lateThrew: unknown;
    const app = factory();
    const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS, maxExecutionMs: LEASE_MS });
    app.post('/x', idempotency(problem === undefined ? { receiver } : { receiver, problem }), factory.json(), (_req: Request, res: Response, next: NextFunction) => {
      answered.promise.then(() => {
        try {
          res.setHeader('x-late', '1');
          res.status(201).json({ late: true });
        } catch (error) {
          lateThrew = error;
          next(error);
        }
        lateWrite.open();
      }, next);
    });
    app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
      errors.push(error);
      res.status(500).json({ error: error.message });
    });
    server = createServer(app).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const first = await fetch(`${base}/x`, { ...pay('k'), signal: AbortSignal.timeout(5_000) });
    const answer = async (): Promise<void> => {
      answered.open();
      await lateWrite.promise;
      await new Promise((resolve) => setImmediate(resolve));
    };
    return { first, answer, errors, lateThrew: () => lateThrew };
  }

  it('answers 409 lease-lost, and the late res.setHeader()/res.json() throws nothing into the error handler', async () => {
    const { first, answer, errors, lateThrew } = await lateWriter();
    const firstBody = (await first.json()) as { code?: string };
    await answer();

    expect(first.status).toBe(409);
    expect(firstBody.code).toBe('idempotency-lease-lost');
    expect(first.headers.get('x-late')).toBeNull();
    expect(lateThrew()).toBeUndefined();
    expect(errors).toEqual([]);
  });

  it('with a problem shape that throws on that 409: the error handler answers, once, and the late res.json() goes nowhere', async () => {
    const { first, answer, errors, lateThrew } = await lateWriter(throwsOnLeaseLost);
    const firstBody = (await first.json()) as { error?: string };
    await answer();

    expect(first.status).toBe(500);
    expect(firstBody.error).toBe('problem shape bug');
    expect(first.headers.get('x-late')).toBeNull();
    expect(lateThrew()).toBeUndefined();
    expect(errors).toHaveLength(1);
  });
});

describe('nestjs (express): a handler still running after the interceptor answered', () => {
  let app: INestApplication | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  /**
   * A Nest app whose handler writes only once the test opens `answered`, after the interceptor answered;
   * its global exception filter records what reaches it.
   */
  async function lateWriter(problem?: typeof throwsOnLeaseLost): Promise<{ first: TestResponse; errors: unknown[] }> {
    const answered = gate();
    const lateWrite = gate();
    const errors: unknown[] = [];
    class LateController {
      async pay(res: ServerResponse): Promise<unknown> {
        await answered.promise;
        try {
          res.setHeader('x-late', '1');
        } finally {
          lateWrite.open();
        }
        return { late: true };
      }
    }
    controller(LateController, { pay: { decorators: [Post('x')], params: [Res({ passthrough: true })] } });
    const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS, maxExecutionMs: LEASE_MS });
    const started = await startNest('express', problem === undefined ? { receiver } : { receiver, problem }, [LateController], (nest) => {
      nest.useGlobalFilters({
        catch(exception: unknown, host: ArgumentsHost) {
          errors.push(exception);
          host.switchToHttp().getResponse<Response>().status(500).json({});
        },
      });
    });
    app = started.app;
    const first = await started.client.request({ method: 'POST', path: '/x', headers: { 'idempotency-key': 'k', 'content-type': 'application/json' }, body: '{"amount":100}', timeoutMs: 5_000 });
    answered.open();
    await lateWrite.promise;
    // Nest writes the returned value a few turns later.
    await new Promise((resolve) => setTimeout(resolve, 20));
    return { first, errors };
  }

  it('answers 409 lease-lost, and the late reply throws nothing into the exception filters', async () => {
    const { first, errors } = await lateWriter();
    expect(first.status).toBe(409);
    expect((JSON.parse(first.body.toString('utf8')) as { code?: string }).code).toBe('idempotency-lease-lost');
    expect(first.header('x-late')).toBeUndefined();
    expect(errors).toEqual([]);
  });

  it("with a problem shape that throws on that 409: Nest's 500, and the late reply throws nothing into the exception filters", async () => {
    const logged = vi.spyOn(Logger.prototype, 'error');
    const { first, errors } = await lateWriter(throwsOnLeaseLost);
    expect(first.status).toBe(500);
    expect(JSON.parse(first.body.toString('utf8'))).toEqual({ statusCode: 500, message: 'Internal server error' });
    expect(first.header('x-late')).toBeUndefined();
    expect(errors).toEqual([]);
    expect(logged).toHaveBeenCalledWith('a failure after the handler ran: problem shape bug', expect.stringContaining('problem shape bug'));
    logged.mockRestore();
  });
});
