// Ceiling column: bare Express behind the least idempotency layer on one Map (see ./_ceiling.mjs for what
// such a layer leaves out). The raw body is kept by express.json()'s `verify`; method + URL + body are
// hashed (SHA-256); another fingerprint is answered 422, an in-flight record 409, a saved one replayed;
// a new key's response is saved as `res.send` sends it.
import { createHash } from 'node:crypto';
import { dep } from './_retrysafe.mjs';

export const meta = {
  id: 'ceiling-memory-express',
  label: 'ceiling: bare express + the least layer on memory (measurement only, not a product)',
  framework: 'express',
  store: 'memory',
  baseline: 'bare-express',
  idempotent: false,
  packages: ['express'],
};

export async function start(ctx) {
  const express = dep('express');
  const records = new Map();
  const app = express();
  const json = express.json({
    verify: (req, res, buf) => {
      req.ceilingText = buf;
    },
  });
  const layer = (req, res, next) => {
    const key = req.get('idempotency-key');
    if (key === undefined) return next();
    const fp = createHash('sha256').update(req.method).update(req.url).update(req.ceilingText ?? '').digest('base64');
    const existing = records.get(key);
    if (existing === undefined) {
      const record = { fp, status: 0, type: '', body: '' };
      records.set(key, record);
      const send = res.send;
      res.send = function saveAndSend(body) {
        record.status = this.statusCode;
        record.type = String(this.get('content-type'));
        record.body = body;
        return send.call(this, body);
      };
      return next();
    }
    if (existing.fp !== fp) return res.status(422).json({ error: 'key reused with another payload' });
    if (existing.status === 0) return res.status(409).json({ error: 'in flight' });
    return res.status(existing.status).type(existing.type).set('idempotent-replayed', 'true').send(existing.body);
  };
  app.post('/payments', json, layer, async (req, res) => {
    const result = await ctx.work(req.get('idempotency-key'), req.body);
    res.status(201).json(result);
  });
  const server = await new Promise((r) => {
    const s = app.listen(ctx.port, ctx.host, () => r(s));
  });
  server.keepAliveTimeout = 60_000; // as the bare-express floor
  return { close: () => new Promise((r) => server.close(r)) };
}
