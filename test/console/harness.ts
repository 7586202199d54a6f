/**
 * Starts `retrysafe console` from source as a child process and opens Chromium (Debian's, through
 * playwright-core) on it, for the console's browser tests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants, mkdtempSync } from 'node:fs';
import { access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { serviceAvailable } from '../support/services.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A running console: its base URL and a way to stop it (SIGTERM, then its exit code). */
export interface RunningConsole {
  readonly url: string;
  /** The line it printed on start. */
  readonly line: string;
  stop(): Promise<number | null>;
}

/** Runs `retrysafe console ...args --port 0` and resolves once it prints the address it listens on. */
export function startConsole(args: readonly string[]): Promise<RunningConsole> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'console', ...args, '--port', '0'], { cwd: ROOT });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr?.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /retrysafe: console on (http:\/\/\S+).*\n/.exec(out);
      if (match?.[1] !== undefined) {
        resolve({
          url: match[1],
          line: match[0],
          stop: () => {
            child.kill('SIGTERM');
            return exited;
          },
        });
      }
    });
    void exited.then((code) => reject(new Error(`retrysafe console exited with ${String(code)}: ${err}`)));
  });
}

/** Debian's Chromium (`apt-get install -y chromium`); treated like a service: a loud skip locally, a failure in CI. */
const CHROMIUM = '/usr/bin/chromium';

/** Whether {@link CHROMIUM} is installed (see `serviceAvailable`). */
export const chromiumAvailable = await serviceAvailable('Chromium', () => access(CHROMIUM, constants.X_OK));

/** Launches headless Chromium from the system's package. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * Where the screenshots go: docs/images (shown in docs/operations.md) only when asked for with
 * `RETRYSAFE_SCREENSHOTS=1`, so an ordinary test run leaves the tracked images alone.
 */
export const IMAGES =
  process.env.RETRYSAFE_SCREENSHOTS === '1'
    ? fileURLToPath(new URL('../../docs/images/', import.meta.url))
    : mkdtempSync(join(tmpdir(), 'retrysafe-console-shots-'));

/**
 * Keeps the page's view of `readPath` as it is now while the test changes the store behind it, so a click
 * then acts on what the operator saw, as if the change came between the last refresh and the click: every
 * `GET readPath` is answered with the first answer after this call until a request to `actionPath` is
 * sent, after which everything passes again (the page's refresh after the action sees the store as it
 * is). Resolves once the frozen answer is taken, i.e. once the page has polled.
 */
export async function freezeUntilAction(page: Page, readPath: string, actionPath: string): Promise<void> {
  let thawed = false;
  let frozen: Promise<{ status: number; body: string }> | undefined;
  let taken: () => void = () => undefined;
  const captured = new Promise<void>((resolve) => (taken = resolve));
  await page.route(
    (url) => url.pathname === readPath,
    async (route) => {
      if (thawed) return route.continue();
      frozen ??= route.fetch().then(async (answer) => ({ status: answer.status(), body: await answer.text() }));
      const { status, body } = await frozen;
      taken();
      return route.fulfill({ status, body, contentType: 'application/json' });
    },
  );
  await page.route(
    (url) => url.pathname === actionPath,
    (route) => {
      thawed = true;
      return route.continue();
    },
  );
  await captured;
}
