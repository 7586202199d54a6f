/**
 * The scope of a key, from the caller's verified identity — never from a header the client chooses
 * freely — so one caller's key never replays another caller's response:
 * - `jwt`: a claim of a bearer token verified against a JWKS (`jose`; a local file or a URL, cached);
 * - `mtls`: the subject of the client certificate the TLS listener verified against its CA;
 * - `api-key`: the SHA-256 of an API key header (the key itself is never stored);
 * - `trusted-header`: a header an authenticating proxy in front sets, named explicitly;
 * - `global`: one namespace for all, only when the configuration says so.
 *
 * @module
 */
import { hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { readFile } from 'node:fs/promises';
import type { TLSSocket } from 'node:tls';
import { createLocalJWKSet, createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey } from 'jose';
import type { ScopeConfig } from './config.js';
import { IdentityRefusedError } from './problems.js';

/** Resolves the scope of a request, or throws {@link IdentityRefusedError} (401). */
export type ScopeResolver = (request: IncomingMessage) => Promise<string>;

function headerOf(request: IncomingMessage, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function distinguishedName(subject: Record<string, string | string[]>): string {
  return Object.entries(subject)
    .map(([name, value]) => `${name}=${Array.isArray(value) ? value.join('+') : value}`)
    .join(',');
}

async function jwtResolver(rule: Extract<ScopeConfig, { kind: 'jwt' }>): Promise<ScopeResolver> {
  let keys: JWTVerifyGetKey;
  if (/^https?:\/\//.test(rule.jwks)) keys = createRemoteJWKSet(new URL(rule.jwks));
  else keys = createLocalJWKSet(JSON.parse(await readFile(rule.jwks, 'utf8')) as Parameters<typeof createLocalJWKSet>[0]);
  const options = { ...(rule.issuer !== undefined && { issuer: rule.issuer }), ...(rule.audience !== undefined && { audience: rule.audience }) };
  return async (request) => {
    const header = headerOf(request, rule.header);
    const token = header === undefined ? undefined : /^Bearer\s+(\S+)$/i.exec(header)?.[1];
    if (token === undefined) throw new IdentityRefusedError(`A bearer token in the ${rule.header} header is required.`);
    let payload: Record<string, unknown>;
    try {
      payload = (await jwtVerify(token, keys, options)).payload;
    } catch (error) {
      throw new IdentityRefusedError('The bearer token could not be verified.', error);
    }
    const claim = payload[rule.claim];
    if (typeof claim !== 'string' && typeof claim !== 'number') throw new IdentityRefusedError(`The bearer token has no ${rule.claim} claim.`);
    return `jwt:${String(claim)}`;
  };
}

/**
 * Builds the resolver of a scope rule (reading a local JWKS file now).
 *
 * @throws when a local JWKS file cannot be read or parsed
 * @example
 * ```ts
 * const scopeOf = await createScopeResolver({ kind: 'api-key', header: 'x-api-key' });
 * ```
 */
export async function createScopeResolver(rule: ScopeConfig): Promise<ScopeResolver> {
  switch (rule.kind) {
    case 'global':
      return () => Promise.resolve('global');
    case 'jwt':
      return jwtResolver(rule);
    case 'mtls':
      return (request) => {
        const socket = request.socket as Partial<TLSSocket>;
        const subject = socket.authorized === true ? socket.getPeerCertificate?.().subject : undefined;
        if (subject === undefined) return Promise.reject(new IdentityRefusedError('A verified client certificate is required.'));
        return Promise.resolve(`mtls:${distinguishedName(subject as unknown as Record<string, string | string[]>)}`);
      };
    case 'api-key':
      return (request) => {
        const value = headerOf(request, rule.header);
        if (value === undefined || value === '') return Promise.reject(new IdentityRefusedError(`The ${rule.header} header is required.`));
        return Promise.resolve(`api-key:${hash('sha256', value)}`);
      };
    case 'trusted-header':
      return (request) => {
        const value = headerOf(request, rule.header);
        if (value === undefined || value === '') return Promise.reject(new IdentityRefusedError(`The ${rule.header} header (set by the authenticating proxy) is required.`));
        return Promise.resolve(`header:${value}`);
      };
  }
}
