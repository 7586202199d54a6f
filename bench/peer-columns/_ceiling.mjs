// The ceiling columns of the peer benchmark: bare Fastify (or Express, `ceiling-memory-express.mjs`) behind
// the least idempotency layer on each store, so one run measures, beside retrysafe, the most a layer
// doing that store's round trips reaches on the same machine in the same run. Measurement only, not a
// product, and not correct under every failure: no lease (an in-flight record never expires), no fencing
// token, no retention, no release of a failed request.
//
// To run them, copy this file and the `ceiling-*.mjs` files into the peer benchmark's `candidates/` folder
// (beside its `_retrysafe.mjs`, whose `dep()` and `schemaOf()` they use: the framework and driver copies
// are the product's), add the columns to `--only`, then read the run with `node ceilings.mjs <raw.json>`
// from this folder. This file is a helper (its name starts with "_"); `ceilings.mjs` is not a column and
// is not copied.
//
// Per request: the raw body text is kept, method + URL + body are hashed (SHA-256); the record is read or
// claimed in the store's cheapest round trips; another fingerprint is answered 422, an in-flight record
// 409, a saved one replayed (status, Content-Type, body); a new key runs the work, and `onSend` saves the
// response before it is sent (awaited, so a retry after a lost reply replays). Stores:
//   memory    one Map (synchronous)
//   redis     claim `SET k fp NX GET PX 60000` (one round trip: nil when this request set it, else the
//             record), save `SET k record PX 86400000`; the socket is corked for the turn, so a turn's
//             commands leave in one write (as node-redis, the peers' client, sends them)
//   postgres  the claim first (`INSERT … ON CONFLICT DO NOTHING RETURNING`, then a SELECT for a key that
//             exists) or the read first (a SELECT, then the INSERT for a key that does not), named
//             prepared statements on pg.Pool({ max: 8 }); save `UPDATE`; the transactional column claims
//             first, then runs BEGIN, the charge INSERT, the save UPDATE and COMMIT on one pooled client
//             (what retrysafe's transactional mode does, with the charge row of its peer-benchmark column)
//   sqlite    better-sqlite3 (WAL, synchronous=NORMAL as retrysafe's default), read first, then INSERT;
//             save UPDATE, each its own autocommit
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { setImmediate } from 'node:timers';
import { dep, schemaOf } from './_retrysafe.mjs';

/** A stored record as the layer keeps it: the fingerprint, then status, Content-Type and body once saved. */
const encode = (fp, status, type, body) => `${fp}\n${status}\n${type}\n${body}`;
function decode(text) {
  const a = text.indexOf('\n');
  if (a < 0) return { fp: text, status: 0 };
  const b = text.indexOf('\n', a + 1);
  const c = text.indexOf('\n', b + 1);
  return { fp: text.slice(0, a), status: Number(text.slice(a + 1, b)), type: text.slice(b + 1, c), body: text.slice(c + 1) };
}

/** The store backends: claim(key, fp) → undefined (won) or the existing record; save(key, fp, status, type, body). */
async function openStore(kind, ctx) {
  if (kind === 'memory') {
    const records = new Map();
    return {
      claim: (key, fp) => {
        const existing = records.get(key);
        if (existing === undefined) records.set(key, { fp, status: 0 });
        return existing;
      },
      save: (key, fp, status, type, body) => void records.set(key, { fp, status, type, body }),
      close: async () => {},
    };
  }
  if (kind === 'redis') {
    const { Redis } = dep('ioredis');
    const client = new Redis(ctx.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true });
    client.on('error', (err) => process.stderr.write(`[ioredis] ${err.message}\n`));
    await client.connect();
    const prefix = ctx.keyPrefix;
    // One socket write per turn, as node-redis does (and retrysafe's coalesce.ts): corked at the turn's
    // first command, uncorked in its check phase.
    const uncork = () => client.stream.uncork();
    const corked = () => {
      if (client.stream.writableCorked > 0) return;
      client.stream.cork();
      setImmediate(uncork);
    };
    return {
      claim: async (key, fp) => {
        corked();
        const old = await client.set(prefix + key, fp, 'PX', 60_000, 'NX', 'GET');
        return old === null ? undefined : decode(old);
      },
      save: (key, fp, status, type, body) => {
        corked();
        return client.set(prefix + key, encode(fp, status, type, body), 'PX', 86_400_000);
      },
      close: async () => client.disconnect(),
    };
  }
  if (kind === 'postgres-claim-first' || kind === 'postgres-read-first') {
    const pg = dep('pg');
    const pool = new pg.Pool({ connectionString: ctx.pgUrl, max: 8 });
    pool.on('error', (err) => process.stderr.write(`[pg pool] ${err.message}\n`));
    const table = `"${schemaOf(ctx.keyPrefix)}"`;
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.query(`CREATE TABLE ${table} (key text PRIMARY KEY, fp text NOT NULL, status int NOT NULL DEFAULT 0, type text, body text)`);
    const insert = { name: 'ceiling_insert', text: `INSERT INTO ${table} (key, fp) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1 AS won` };
    const select = { name: 'ceiling_select', text: `SELECT fp, status, type, body FROM ${table} WHERE key = $1` };
    const update = { name: 'ceiling_update', text: `UPDATE ${table} SET status = $2, type = $3, body = $4 WHERE key = $1` };
    const read = async (key) => (await pool.query({ ...select, values: [key] })).rows[0];
    const tryInsert = async (key, fp) => (await pool.query({ ...insert, values: [key, fp] })).rowCount === 1;
    const claim =
      kind === 'postgres-claim-first'
        ? async (key, fp) => ((await tryInsert(key, fp)) ? undefined : ((await read(key)) ?? { fp, status: 0 }))
        : async (key, fp) => (await read(key)) ?? ((await tryInsert(key, fp)) ? undefined : ((await read(key)) ?? { fp, status: 0 }));
    return {
      claim,
      save: (key, fp, status, type, body) => pool.query({ ...update, values: [key, status, type, body] }),
      pool,
      table,
      update,
      close: async () => {
        await pool.query(`DROP TABLE IF EXISTS ${table}`);
        await pool.end();
      },
    };
  }
  if (kind === 'sqlite') {
    const Database = dep('better-sqlite3');
    const dir = mkdtempSync(join(tmpdir(), 'rs-ceiling-sqlite-'));
    const db = new Database(join(dir, 'ceiling.db'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec('CREATE TABLE records (key TEXT PRIMARY KEY, fp TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0, type TEXT, body TEXT)');
    const select = db.prepare('SELECT fp, status, type, body FROM records WHERE key = ?');
    const insert = db.prepare('INSERT INTO records (key, fp) VALUES (?, ?) ON CONFLICT DO NOTHING');
    const update = db.prepare('UPDATE records SET status = ?, type = ?, body = ? WHERE key = ?');
    return {
      claim: (key, fp) => select.get(key) ?? (insert.run(key, fp).changes === 1 ? undefined : select.get(key)),
      save: (key, fp, status, type, body) => void update.run(status, type, body, key),
      close: async () => {
        db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  throw new Error(`unknown ceiling store ${kind}`);
}

/** The harness's POST /payments handler: the work, answered 201. */
function plainHandler(ctx) {
  return async (req, reply) => {
    const result = await ctx.work(req.headers['idempotency-key'], req.body);
    reply.code(201);
    return result;
  };
}

/**
 * The transactional handler: the work, then one transaction that writes a charge row and saves the
 * response (BEGIN, INSERT, UPDATE, COMMIT on one pooled client); the saved bytes are the bytes sent.
 */
async function transactionalHandler(ctx, store) {
  const charges = `"${schemaOf(ctx.keyPrefix)}_charges"`;
  await store.pool.query(`DROP TABLE IF EXISTS ${charges}`);
  await store.pool.query(`CREATE TABLE ${charges} (id text PRIMARY KEY, idem_key text NOT NULL, amount integer, currency text)`);
  const closeStore = store.close;
  store.close = async () => {
    await store.pool.query(`DROP TABLE IF EXISTS ${charges}`);
    await closeStore();
  };
  const insert = { name: 'ceiling_charge', text: `INSERT INTO ${charges} (id, idem_key, amount, currency) VALUES ($1, $2, $3, $4)` };
  return async (req, reply) => {
    const claim = req.ceilingClaim;
    const result = await ctx.work(req.headers['idempotency-key'], req.body);
    const body = JSON.stringify(result);
    if (claim !== null) {
      const client = await store.pool.connect();
      try {
        await client.query('BEGIN');
        await client.query({ ...insert, values: [result.id, result.key, result.amount, result.currency] });
        await client.query({ ...store.update, values: [claim.key, 201, 'application/json; charset=utf-8', body] });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      req.ceilingClaim = null; // saved: onSend has nothing left to do
    }
    return reply.code(201).type('application/json; charset=utf-8').send(body);
  };
}

/**
 * The `meta` and `start` of the ceiling column on `kind` (`memory`, `redis`, `sqlite`, `postgres-claim-first`,
 * `postgres-read-first`, `postgres-tx`), whose records the harness files under `store`.
 */
export function ceilingColumn(kind, store) {
  return {
    meta: {
      id: `ceiling-${kind}`,
      label: `ceiling: bare fastify + the least layer on ${kind} (measurement only, not a product)`,
      framework: 'fastify',
      store,
      baseline: 'bare-fastify',
      idempotent: false,
      packages: ['fastify'],
    },
    start: (ctx) => startCeiling(kind, ctx),
  };
}

/** Starts bare Fastify with the least layer on `kind` and the harness's POST /payments. */
async function startCeiling(kind, ctx) {
  const Fastify = dep('fastify');
  const transactional = kind === 'postgres-tx';
  const store = await openStore(transactional ? 'postgres-claim-first' : kind, ctx);
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 }); // as the bare-fastify floor
  app.decorateRequest('ceilingText', null);
  app.decorateRequest('ceilingClaim', null);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    request.ceilingText = text;
    try {
      done(null, JSON.parse(text));
    } catch (error) {
      done(error, undefined);
    }
  });
  app.addHook('preHandler', async (request, reply) => {
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string') return;
    const fp = createHash('sha256').update(request.method).update(request.url).update(request.ceilingText ?? '').digest('base64');
    const existing = await store.claim(key, fp);
    if (existing === undefined) {
      request.ceilingClaim = { key, fp };
    } else if (existing.fp !== fp) {
      return reply.code(422).send({ error: 'key reused with another payload' });
    } else if (existing.status === 0) {
      return reply.code(409).send({ error: 'in flight' });
    } else {
      return reply.code(existing.status).header('content-type', existing.type).header('idempotent-replayed', 'true').send(existing.body);
    }
  });
  app.addHook('onSend', async (request, reply, payload) => {
    const claim = request.ceilingClaim;
    if (claim !== null) await store.save(claim.key, claim.fp, reply.statusCode, String(reply.getHeader('content-type')), payload);
    return payload;
  });
  app.post('/payments', transactional ? await transactionalHandler(ctx, store) : plainHandler(ctx));
  await app.listen({ port: ctx.port, host: ctx.host });
  return {
    close: async () => {
      await app.close();
      await store.close();
    },
  };
}
