/**
 * The gateway's configuration (schema, defaults, one-line errors, `--check`, hot reload keeping the old
 * configuration on error), its scope rules (JWT against a JWKS file, API key, trusted header) and its
 * header handling (hop-by-hop removed, forwarded headers appended).
 */
import { execFile } from 'node:child_process';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { Agent } from 'undici';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayConfigError, resolveConfig } from '../../src/gateway/config.js';
import { clientHeaders, upstreamHeaders } from '../../src/gateway/headers.js';
import { IdentityRefusedError } from '../../src/gateway/problems.js';
import { createScopeResolver } from '../../src/gateway/scope.js';
import { startGateway } from '../../src/gateway/server.js';
import { loadConfig } from '../../src/gateway/config.js';
import { runCli } from '../support/run-cli.js';
import { send, workDir, writeConfig } from './support.js';

const run = promisify(execFile);

const BASE = {
  listen: '127.0.0.1:0',
  store: 'memory:',
  scope: 'global',
  upstreams: { app: { url: 'http://127.0.0.1:9' } },
  routes: [{ path: '/payments', upstream: 'app' }],
};

function refusal(document: unknown): string {
  try {
    resolveConfig(document, '/etc/gateway.yaml');
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayConfigError);
    return (error as Error).message;
  }
  throw new Error('the configuration was accepted');
}

describe('gateway configuration', () => {
  it('fills every default, in milliseconds and bytes', () => {
    const config = resolveConfig({ ...BASE, defaults: { replayHeaders: ['X-Request-Id'] } }, '/etc/gateway.yaml');
    const route = config.routes[0];
    expect(route).toMatchObject({ key: 'required', ttlMs: 86_400_000, leaseMs: 30_000, timeoutMs: 30_000, inFlight: 'reject', waitMs: 10_000, maxBodyBytes: 1_048_576, maxResponseBytes: 1_048_576, serverErrors: 'release', forwardKey: true, reconcilePath: undefined });
    expect([...(route?.methods ?? [])]).toEqual(['POST', 'PATCH']);
    expect(route?.replayHeaders.has('x-request-id')).toBe(true);
    expect(route?.replayHeaders.has('content-type')).toBe(true);
    expect(config.listen).toEqual([{ host: '127.0.0.1', port: 0, tls: undefined }]);
    expect(config).toMatchObject({ drainMs: 10_000, accessLog: true, admin: undefined, scope: { kind: 'global' } });
  });

  it('takes a route setting over the defaults, and sizes and durations as text', () => {
    const config = resolveConfig({ ...BASE, defaults: { ttl: '2h', maxBody: '64MiB' }, routes: [{ path: '/a/:id/**', upstream: 'app', ttl: 60_000, lease: '5s', maxResponse: '10KB', methods: ['put'] }] }, '/x.yaml');
    expect(config.routes[0]).toMatchObject({ ttlMs: 60_000, leaseMs: 5_000, maxBodyBytes: 64 * 1_048_576, maxResponseBytes: 10_000 });
    expect(config.routes[0]?.methods.has('PUT')).toBe(true);
    expect(config.routes[0]?.pattern.test('/a/7/b/c')).toBe(true);
    expect(config.routes[0]?.pattern.test('/a/7')).toBe(false);
  });

  it.each([
    [{ ...BASE, scope: undefined }, /must have required property 'scope'/],
    [{ ...BASE, extra: 1 }, /must NOT have additional properties \("extra"\)/],
    [{ ...BASE, routes: [{ path: '/p', upstream: 'app', lease: '30 seconds' }] }, /routes\.0\.lease/],
    [{ ...BASE, routes: [{ path: '/p', upstream: 'nope' }] }, /routes\.0 names the upstream "nope"/],
    [{ ...BASE, routes: [{ path: '/p', upstream: 'app', lease: '2h', ttl: '1h' }] }, /routes\.0\.lease \(7200000 ms\) must not exceed/],
    [{ ...BASE, routes: [{ path: '/**/x', upstream: 'app' }] }, /"\*\*" must be the last segment/],
    [{ ...BASE, store: 'mysql://db' }, /mysql/],
    [{ ...BASE, routes: [{ path: '/p', upstream: 'app', replayHeaders: ['Set-Cookie'] }] }, /replayHeaders\.0/],
    [{ ...BASE, scope: { mtls: {} } }, /scope mtls needs every listener to have tls with a ca/],
    [{ ...BASE, scope: 'tenant' }, /scope/],
  ])('refuses %j in one line naming the key', (document, message) => {
    const text = refusal(document);
    expect(text).toMatch(message);
    expect(text.startsWith('/etc/gateway.yaml: ') || text.startsWith('/x.yaml')).toBe(true);
    expect(text).not.toContain('\n');
  });
});

describe('retrysafe gateway --check', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  beforeAll(async () => {
    work = await workDir();
  });
  afterAll(async () => {
    await work?.remove();
  });

  it('exits 0 on a valid file and 2 with one line on an invalid one, without starting', async () => {
    const good = await writeConfig(work.dir, BASE, 'good.yaml');
    const valid = await runCli(['gateway', '--config', good, '--check']);
    expect(valid).toMatchObject({ code: 0, stderr: '' });
    expect(valid.stdout).toContain('is valid: 1 routes, 1 upstreams, scope global');
    const bad = join(work.dir, 'bad.json');
    await writeFile(bad, JSON.stringify({ ...BASE, scope: undefined }));
    const invalid = await runCli(['gateway', '--config', bad, '--check']);
    expect(invalid.code).toBe(2);
    expect(invalid.stderr).toMatch(/^retrysafe: .*bad\.json: the document must have required property 'scope'\n$/);
    expect((await runCli(['gateway', '--check'])).code).toBe(2);
  });

  it('reloads a valid file atomically and keeps the old configuration when the new one is invalid', async () => {
    const path = await writeConfig(work.dir, BASE, 'reload.yaml');
    const reloads: (Error | undefined)[] = [];
    const gateway = await startGateway(await loadConfig(path), { log: () => undefined, onReload: (error) => reloads.push(error), watchFile: true });
    const url = `http://127.0.0.1:${gateway.addresses[0]?.port}`;
    try {
      expect((await send(`${url}/orders`, { key: 'k' })).status).toBe(404);
      // Saved as editors do: a new file renamed over the old one.
      await writeConfig(work.dir, { ...BASE, routes: [{ path: '/orders', upstream: 'app' }] }, 'reload.yaml.new');
      await rename(join(work.dir, 'reload.yaml.new'), path);
      for (let i = 0; i < 50 && reloads.length === 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(reloads).toEqual([undefined]);
      // The upstream at port 9 refuses: the route is served (502), not missing (404).
      expect((await send(`${url}/orders`, { key: 'k' })).status).toBe(502);
      await writeFile(path, 'routes: [');
      expect(await gateway.reload()).toBe(false);
      await writeConfig(work.dir, { ...BASE, store: 'sqlite:./other.db', routes: [{ path: '/orders', upstream: 'app' }] }, 'reload.yaml');
      expect(await gateway.reload()).toBe(false);
      expect(reloads.at(-1)?.message).toMatch(/store cannot change on reload/);
      expect((await send(`${url}/orders`, { key: 'k' })).status).toBe(502);
      expect(gateway.config().routes[0]?.path).toBe('/orders');
    } finally {
      await gateway.close();
    }
  });
});

describe('gateway scope rules', () => {
  const request = (headers: Record<string, string>): IncomingMessage => ({ headers, socket: {} }) as unknown as IncomingMessage;

  it('takes a claim of a JWT verified against a JWKS file, and refuses an unverifiable token', async () => {
    const work = await workDir();
    try {
      const { publicKey, privateKey } = await generateKeyPair('ES256');
      const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' };
      const jwks = join(work.dir, 'jwks.json');
      await writeFile(jwks, JSON.stringify({ keys: [jwk] }));
      const resolve = await createScopeResolver({ kind: 'jwt', jwks, claim: 'tenant', header: 'authorization', issuer: 'https://id.example', audience: undefined });
      const token = await new SignJWT({ tenant: 'acme' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setIssuer('https://id.example').setExpirationTime('5m').sign(privateKey);
      expect(await resolve(request({ authorization: `Bearer ${token}` }))).toBe('jwt:acme');
      const other = await new SignJWT({ tenant: 'acme' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setIssuer('https://evil.example').sign(privateKey);
      await expect(resolve(request({ authorization: `Bearer ${other}` }))).rejects.toBeInstanceOf(IdentityRefusedError);
      await expect(resolve(request({ authorization: `Bearer ${token.slice(0, -4)}AAAA` }))).rejects.toBeInstanceOf(IdentityRefusedError);
      await expect(resolve(request({}))).rejects.toBeInstanceOf(IdentityRefusedError);
    } finally {
      await work.remove();
    }
  });

  it('hashes an API key, and takes a trusted proxy header as is', async () => {
    const byKey = await createScopeResolver({ kind: 'api-key', header: 'x-api-key' });
    const scope = await byKey(request({ 'x-api-key': 'secret' }));
    expect(scope).toMatch(/^api-key:[0-9a-f]{64}$/);
    expect(scope).not.toContain('secret');
    await expect(byKey(request({}))).rejects.toBeInstanceOf(IdentityRefusedError);
    const byHeader = await createScopeResolver({ kind: 'trusted-header', header: 'x-tenant' });
    expect(await byHeader(request({ 'x-tenant': 't1' }))).toBe('header:t1');
  });
});

describe('gateway mTLS scope', () => {
  it('takes the verified client certificate subject as the scope, and refuses a client without one', async () => {
    const work = await workDir();
    const upstream = createServer((_, res) => res.writeHead(201, { 'content-type': 'text/plain' }).end(String(++executions)));
    let executions = 0;
    try {
      const file = (name: string): string => join(work.dir, name);
      const ssl = (...args: string[]) => run('openssl', args, { cwd: work.dir });
      await ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-subj', '/CN=test-ca', '-days', '1');
      for (const name of ['server', 'client-a', 'client-b']) {
        await ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
        await writeFile(file(`${name}.ext`), name === 'server' ? 'subjectAltName=IP:127.0.0.1' : 'extendedKeyUsage=clientAuth');
        await ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.pem`, '-days', '1', '-extfile', `${name}.ext`);
      }
      await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
      const path = await writeConfig(work.dir, {
        ...BASE,
        listen: { address: '127.0.0.1:0', tls: { cert: 'server.pem', key: 'server.key', ca: 'ca.pem' } },
        scope: { mtls: {} },
        upstreams: { app: { url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } },
      });
      const gateway = await startGateway(await loadConfig(path), { log: () => undefined, watchFile: false });
      const url = `https://127.0.0.1:${gateway.addresses[0]?.port}/payments`;
      const ca = await readFile(file('ca.pem'));
      const as = async (name: string | undefined) =>
        new Agent({ connect: { ca, ...(name !== undefined && { cert: await readFile(file(`${name}.pem`)), key: await readFile(file(`${name}.key`)) }) } });
      try {
        const a = await as('client-a');
        const first = await send(url, { key: 'k', dispatcher: a });
        const again = await send(url, { key: 'k', dispatcher: a });
        const other = await send(url, { key: 'k', dispatcher: await as('client-b') });
        expect([first.status, again.status, other.status]).toEqual([201, 201, 201]);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(other.headers['idempotent-replayed']).toBeUndefined();
        expect(executions).toBe(2);
        await expect(send(url, { key: 'k', dispatcher: await as(undefined) })).rejects.toThrow();
        expect(executions).toBe(2);
      } finally {
        await gateway.close();
      }
    } finally {
      upstream.close();
      await work.remove();
    }
  });
});

describe('gateway headers', () => {
  it('drops hop-by-hop headers and those Connection names, and appends the forwarded headers', () => {
    const out = upstreamHeaders(
      ['Host', 'gw', 'Connection', 'keep-alive, X-Secret', 'Keep-Alive', '5', 'X-Secret', 's', 'TE', 'trailers', 'Idempotency-Key', 'k', 'X-Forwarded-For', '10.0.0.1', 'Accept', 'a', 'Accept', 'b', 'Content-Length', '3'],
      { address: '::1', host: 'gw', proto: 'http' },
    );
    const pairs: [string, string][] = [];
    for (let i = 0; i < out.length; i += 2) pairs.push([out[i] as string, out[i + 1] as string]);
    expect(pairs).toEqual([
      ['Idempotency-Key', 'k'],
      ['Accept', 'a'],
      ['Accept', 'b'],
      ['forwarded', 'for="[::1]";proto=http;host="gw"'],
      ['x-forwarded-for', '10.0.0.1, ::1'],
      ['x-forwarded-host', 'gw'],
      ['x-forwarded-proto', 'http'],
    ]);
    expect(clientHeaders({ connection: 'close, x-hop', 'x-hop': '1', 'transfer-encoding': 'chunked', 'set-cookie': ['a=1', 'b=2'], etag: '"e"' })).toEqual({ 'set-cookie': ['a=1', 'b=2'], etag: '"e"' });
  });
});
