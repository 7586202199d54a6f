/**
 * NestJS 11 payments handler for the benchmark, on the Express or the Fastify platform, bare or behind
 * `retrysafe/nestjs`. The app is created with `{ rawBody: true }` either way (the module's documented
 * setup: the fingerprint hashes the raw bytes). The controller is decorated through Nest's decorator
 * functions called directly, so the bench build needs no decorator compiler settings.
 */
import 'reflect-metadata';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Body, Controller, Get, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { IdempotencyModule } from '../../src/http/nestjs.js';
import { charge, countRequests, snapshot, type BenchApp } from './app.js';

/** The NestJS platforms the benchmark runs on. */
export type NestPlatform = 'express' | 'fastify';

export async function startNest(platform: NestPlatform, bench: BenchApp): Promise<number> {
  if (bench.minimalLayer === true) throw new TypeError('the minimal layer is Fastify only');
  class PaymentsController {
    async pay(body: { amount?: number }): Promise<{ id: string; amount: number }> {
      await bench.roundTrips?.();
      return charge(body.amount);
    }

    stats(): ReturnType<typeof snapshot> {
      return snapshot();
    }
  }
  const prototype = PaymentsController.prototype as object;
  const decorate = (method: 'pay' | 'stats', route: MethodDecorator): void => {
    const descriptor = Object.getOwnPropertyDescriptor(prototype, method);
    if (!descriptor) throw new Error(`no method ${method}`);
    route(prototype, method, descriptor);
  };
  decorate('pay', Post('payments'));
  Body()(prototype, 'pay', 0);
  decorate('stats', Get('__stats'));
  Controller()(PaymentsController);

  class AppModule {}
  const imports = bench.receiver ? [IdempotencyModule.forRoot({ receiver: bench.receiver })] : [];
  Module({ imports, controllers: [PaymentsController] })(AppModule);
  const adapter = platform === 'express' ? new ExpressAdapter() : new FastifyAdapter();
  const app: INestApplication = await NestFactory.create(AppModule, adapter, { rawBody: true, logger: false });
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  // Fastify's default (Node's is 5 s): a counter under valgrind on a loaded machine can leave the
  // connections idle longer than that between its warm-up and its count, and a connection the server
  // closed is reset under the next request.
  server.keepAliveTimeout = 72_000;
  countRequests(server);
  return (server.address() as AddressInfo).port;
}
