import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { AppModule } from './app.module.js';

export type Platform = 'express' | 'fastify';

/** The application on either platform; `rawBody: true` lets the fingerprint hash the body's exact bytes. */
export function createApp(platform: Platform): Promise<INestApplication> {
  const adapter = platform === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
  return NestFactory.create(AppModule, adapter, { rawBody: true, logger: ['error', 'warn'] });
}
