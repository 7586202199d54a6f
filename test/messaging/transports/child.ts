/**
 * Runs `fixtures/consumer-child.ts` in its own Node process and resolves with how it ended; and the two crash
 * scenarios every broker's consumer is tested under, the child SIGKILLed after the inbox commit and
 * mid-handler, each followed by a consumer that gets the message again.
 */
import { runCrashingChild } from '../../support/crashing-child.js';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { expect } from 'vitest';
import type { MessageHandler } from '../../../src/messaging/inbox/index.js';
import { writeEffect, type EffectsSchema } from '../../support/messaging.js';
import { count, type Recorder } from './recorder.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/consumer-child.ts', import.meta.url));

/** Starts the child with `env` added and resolves with its exit signal once it dies (or rejects after `timeoutMs`). */
export function runChild(env: Record<string, string>, timeoutMs = 20_000): Promise<NodeJS.Signals | null> {
  return runCrashingChild(FIXTURE, 'consumer child', env, timeoutMs);
}

/** A crash scenario on one broker. */
interface CrashScenario {
  readonly db: EffectsSchema;
  /** The id of the one message published before the child starts. */
  readonly id: string;
  /** The child's broker variables (`BROKER`, `QUEUE` or `STREAM`/`DURABLE` or `BOOTSTRAP`/`TOPIC`/`GROUP`). */
  readonly env: Record<string, string>;
  /** Starts the consumer that takes over, on the same queue or topic, with a new inbox of consumer `billing`. */
  readonly consume: (handler: MessageHandler<pg.PoolClient>) => Promise<Recorder<unknown>>;
  /** How long the child may take to crash, and the consumer to settle the message, in milliseconds. @defaultValue 20_000 and 15_000 */
  readonly timeoutMs?: number;
}

/**
 * The child is SIGKILLed between the inbox commit and the ack (or offset commit): the consumer that takes over
 * gets the message again and acks it as a duplicate without running the handler, and the effect stays at one.
 */
export async function expectRedeliverySkipped({ db, id, env, consume, timeoutMs }: CrashScenario): Promise<void> {
  expect(await runChild({ ...env, SCHEMA: db.schema, CONSUMER: 'billing', CRASH: 'after-commit' }, timeoutMs)).toBe('SIGKILL');
  expect(await db.count('billing', id)).toBe(1);
  const runs = new Map<string, number>();
  const recorder = await consume(writeEffect(db, runs));
  await recorder.until((seen) => count(seen, id) === 1, timeoutMs);
  expect(count(recorder.seen, id, 'ack')).toBe(1);
  expect(runs.get(id)).toBeUndefined();
  expect(await db.count('billing', id)).toBe(1);
}

/**
 * The child is SIGKILLed inside the handler, before the commit: nothing of it persists, and the consumer that
 * takes over runs the message as attempt 2 and acks it, leaving one effect.
 */
export async function expectRedeliveryProcessed({ db, id, env, consume, timeoutMs }: CrashScenario): Promise<void> {
  expect(await runChild({ ...env, SCHEMA: db.schema, CONSUMER: 'billing', CRASH: 'mid-handler' }, timeoutMs)).toBe('SIGKILL');
  expect(await db.count('billing', id)).toBe(0);
  const attempts: number[] = [];
  const recorder = await consume(async (message, tx, { attempt }) => {
    attempts.push(attempt);
    await db.write(tx, 'billing', message.id ?? '');
  });
  await recorder.until((seen) => count(seen, id) === 1, timeoutMs);
  expect(count(recorder.seen, id, 'ack')).toBe(1);
  expect(attempts).toEqual([2]);
  expect(await db.count('billing', id)).toBe(1);
}
