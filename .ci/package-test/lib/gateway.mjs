// The gateway check of the package test: docs/gateway.md's 5-minute start, run against the installed
// package. examples/gateway (its config and the Python upstream) is copied next to the scratch project; the
// only changes to the config are the three ports (free ones instead of 8080, 9090 and 5000), so the
// example file is what is tested. Then the curl lines of the 5-minute start, as fetch calls, with the
// answers the docs promise: 201, the replay with Idempotent-Replayed, 422, 409 with Retry-After, 504
// idempotency-outcome-unknown, and the reconcile hook's replay on the retry.
/* global fetch, AbortSignal -- Node's own, as in any browser */
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { env } from 'node:process';
import { setTimeout } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './services.mjs';


/** Starts a child process whose output is collected; `stop()` ends it (SIGTERM, then SIGKILL after 5 s). */
function start(command, args, cwd) {
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { text: '' };
  child.stdout.on('data', (chunk) => (output.text += chunk));
  child.stderr.on('data', (chunk) => (output.text += chunk));
  const stop = () =>
    new Promise((resolvePromise) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolvePromise();
      child.once('exit', () => resolvePromise());
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
    });
  return { child, output, stop };
}

async function waitFor(what, url, process) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (process.child.exitCode !== null) throw new Error(`${what} exited before answering:\n${process.output.text}`);
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${what} did not answer ${url} within 20 s:\n${process.output.text}`);
    await sleep(100);
  }
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

/**
 * Runs the 5-minute start of docs/gateway.md in `dir` with the package installed there (its
 * node_modules/.bin/retrysafe). Throws with the processes' output on the first answer that differs.
 */
export async function checkGatewayStart(repo, dir) {
  const home = join(dir, 'gateway');
  mkdirSync(home, { recursive: true });
  cpSync(join(repo, 'examples/gateway'), home, { recursive: true });
  const [listen, admin, upstreamPort] = [await freePort(), await freePort(), await freePort()];
  const config = readFileSync(join(home, 'gateway.yaml'), 'utf8')
    .replace('"127.0.0.1:8080"', `"127.0.0.1:${listen}"`)
    .replace('"127.0.0.1:9090"', `"127.0.0.1:${admin}"`)
    .replace('"http://127.0.0.1:5000"', `"http://127.0.0.1:${upstreamPort}"`);
  expect(config.includes(`:${listen}"`) && config.includes(`:${admin}"`) && config.includes(`:${upstreamPort}"`), 'examples/gateway/gateway.yaml no longer has the ports 8080, 9090 and 5000 of docs/gateway.md');
  writeFileSync(join(home, 'gateway.yaml'), config);

  const upstream = start('python3', ['upstream.py', String(upstreamPort), 'payments.db'], home);
  let gateway;
  try {
    await waitFor('the example upstream', `http://127.0.0.1:${upstreamPort}/healthz`, upstream);
    gateway = start(join(dir, 'node_modules/.bin/retrysafe'), ['gateway', '--config', 'gateway.yaml'], home);
    await waitFor('retrysafe gateway', `http://127.0.0.1:${admin}/readyz`, gateway);
    const post = (key, body, fault) =>
      fetch(`http://127.0.0.1:${listen}/payments`, {
        method: 'POST',
        headers: { 'x-api-key': 'demo', 'idempotency-key': key, 'content-type': 'application/x-www-form-urlencoded', ...(fault ? { 'x-fault': fault } : {}) },
        body,
      });
    const run = `pkg-${Date.now()}`;

    const first = await post(`${run}-1`, '{"amount":100}');
    const firstBody = await first.text();
    expect(first.status === 201, `first POST: expected 201, got ${first.status} ${firstBody}`);
    const replay = await post(`${run}-1`, '{"amount":100}');
    const replayBody = await replay.text();
    expect(replay.status === 201 && replayBody === firstBody, `replay: expected 201 ${firstBody}, got ${replay.status} ${replayBody}`);
    expect(replay.headers.get('idempotent-replayed') === 'true', 'replay lacks Idempotent-Replayed: true');
    const other = await post(`${run}-1`, '{"amount":999}');
    const otherBody = await other.text();
    expect(other.status === 422 && otherBody.includes('idempotency-key-reused'), `another body: expected 422 idempotency-key-reused, got ${other.status} ${otherBody}`);

    const slow = post(`${run}-2`, '{}', 'sleep=3000');
    await sleep(500);
    const duplicate = await post(`${run}-2`, '{}');
    const duplicateBody = await duplicate.text();
    expect(duplicate.status === 409 && duplicate.headers.has('retry-after'), `duplicate while running: expected 409 with Retry-After, got ${duplicate.status} ${duplicateBody}`);
    const slowAnswer = await slow;
    expect(slowAnswer.status === 201, `the slow first request: expected 201, got ${slowAnswer.status} ${await slowAnswer.text()}`);

    const timedOut = await post(`${run}-3`, '{}', 'sleep=6000');
    const timedOutBody = await timedOut.text();
    expect(timedOut.status === 504 && timedOutBody.includes('idempotency-outcome-unknown'), `past the upstream timeout: expected 504 idempotency-outcome-unknown, got ${timedOut.status} ${timedOutBody}`);
    const reconciled = await post(`${run}-3`, '{}');
    const reconciledBody = await reconciled.text();
    expect(reconciled.status === 201 && reconciledBody.includes(`"key": "${run}-3"`), `the retry after the timeout: expected the reconciled 201, got ${reconciled.status} ${reconciledBody}`);

    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const answer = await fetch(`http://127.0.0.1:${admin}${path}`);
      expect(answer.ok, `admin ${path}: ${answer.status}`);
    }
  } catch (error) {
    error.message += `\n--- upstream output ---\n${upstream.output.text}${gateway ? `\n--- gateway output ---\n${gateway.output.text}` : ''}`;
    throw error;
  } finally {
    await gateway?.stop();
    await upstream.stop();
  }
}
