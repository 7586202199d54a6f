/**
 * The NestJS module's answer to its pipeline failing after the handler ran (`pipeline.handle` rejecting
 * while the Node response is held: a `problem` shape that throws on the 409 of a fenced-off holder, a
 * receiver observer that throws as the request ends).
 *
 * @module
 */
import type { ServerResponse } from 'node:http';
import { Logger } from '@nestjs/common';
import { sendFresh } from './held-response.js';
import type { OutgoingResponse } from './pipeline.js';

/** Nest's own answer to an exception that is not an `HttpException` (its `BaseExceptionFilter`'s). */
const INTERNAL_ERROR: OutgoingResponse = Object.freeze({
  status: 500,
  headers: Object.freeze({ 'content-type': 'application/json; charset=utf-8' }),
  body: new TextEncoder().encode('{"statusCode":500,"message":"Internal server error"}'),
});
const logger = new Logger('IdempotencyModule');

/**
 * Answers a pipeline that failed after the handler ran. Nest has written the handler's result (or a
 * filter's answer) into the held response already, so its exception filters are behind the request: the
 * error is logged, and Nest's 500 goes in place of the held response (see `sendFresh`).
 */
export function answerLateFailure(res: ServerResponse, error: unknown): void {
  logger.error(`a failure after the handler ran: ${error instanceof Error ? error.message : String(error)}`, error instanceof Error ? error.stack : undefined);
  sendFresh(res, INTERNAL_ERROR);
}
