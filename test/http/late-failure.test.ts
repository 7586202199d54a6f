/**
 * The late-failure scenarios (see `late-failure-scenarios.ts`) on every framework driver: Express 5 and 4
 * and NestJS on both platforms, which hold the handler's response on the Node response, then Fastify and
 * Hono, which answered already.
 */
import 'reflect-metadata';
import express from 'express';
import { express4Factory, expressDriver } from './express-driver.js';
import { fastifyDriver, fastifySocketDriver } from './fastify-driver.js';
import { honoDriver } from './hono-driver.js';
import { lateFailureScenarios } from './late-failure-scenarios.js';
import { nestDriver } from './nestjs-driver.js';

for (const driver of [expressDriver('express 5', express), expressDriver('express 4', express4Factory), nestDriver('express'), nestDriver('fastify')]) {
  lateFailureScenarios(driver, true);
}
for (const driver of [fastifyDriver, fastifySocketDriver, honoDriver]) lateFailureScenarios(driver, false);
