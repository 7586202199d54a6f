/**
 * The watchdog on the waits between a demo and its child processes, against a real child that never
 * answers: the wait fails with a message naming what it awaited, in time, or as soon as the run aborts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { exitOf, NoAnswerError, watchdog } from '../../../src/demo/harness/watchdog.js';

const children: ChildProcess[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) {
    child.kill('SIGKILL');
    await exitOf(child);
  }
});

/** A child on an IPC channel that reads every message and answers none. */
async function silentChild(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', "process.on('message', () => undefined); process.send('up');"], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] });
  children.push(child);
  await new Promise((resolve) => child.once('message', resolve));
  return child;
}

/** What a supervisor does: sends a request and waits for the child's answer. */
function ask(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve) => {
    child.once('message', resolve);
    child.send({ type: 'charges', keyPrefix: 'pay-' });
  });
}

describe('watchdog', () => {
  it('fails a wait on a child that never answers, naming what it waited for', async () => {
    const child = await silentChild();
    const started = performance.now();
    const error = await watchdog(ask(child), 300, 'the payments server (listing the charges)').catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(NoAnswerError);
    expect((error as Error).message).toBe('no answer from the payments server (listing the charges) in 300 ms');
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    // The child is still there: the caller kills it.
    expect(child.exitCode).toBeNull();
  });

  it('fails it at once with the abort reason when the run is aborted meanwhile, or was already', async () => {
    const child = await silentChild();
    const abort = new AbortController();
    const interrupted = new Error('interrupted');
    const waiting = watchdog(ask(child), 60_000, 'the payments server', abort.signal);
    setTimeout(() => abort.abort(interrupted), 50);
    await expect(waiting).rejects.toBe(interrupted);
    await expect(watchdog(ask(child), 60_000, 'the payments server', abort.signal)).rejects.toBe(interrupted);
    const other = new AbortController();
    other.abort('not an error');
    await expect(watchdog(ask(child), 60_000, 'the payments server', other.signal)).rejects.toThrow('aborted while waiting for the payments server');
  });

  it('passes an answer or a failure through, and exitOf resolves for a child that has already exited', async () => {
    await expect(watchdog(Promise.resolve(7), 1_000, 'x')).resolves.toBe(7);
    await expect(watchdog(Promise.reject(new Error('refused')), 1_000, 'x')).rejects.toThrow('refused');
    const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('exit', resolve));
    await expect(exitOf(child)).resolves.toBeUndefined();
  });
});
