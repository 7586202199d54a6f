// Shared glue of the DynamoDB column pair (`ours-dynamodb-fn`, `powertools-dynamodb`): one DynamoDB Local
// endpoint for both (BENCH_DYNAMODB_URL, e.g. http://127.0.0.1:8000, started beside the harness), a fresh
// table per server start, a fake Lambda context, and a count of the requests each column's client sends.
// A helper, not a column (its name starts with "_"); copy it with both columns and dynamodb-round-trips.mjs
// into the peer benchmark's `candidates/`, and install @aws-sdk/client-dynamodb and @aws-sdk/lib-dynamodb
// there (npm install --save-exact, the product's versions) for Powertools' DynamoDB layer.
//
// Both columns serve POST /payments through fastify, build the event { idempotencyKey: <header>, body }
// and await the wrapped function with it and the fake context ({ getRemainingTimeInMillis: () => 30_000 },
// the constant context of the harness's powertools columns): in-flight claims are honoured 30 s.
import process from 'node:process';

/** The endpoint both columns share. */
export function endpoint() {
  const url = process.env.BENCH_DYNAMODB_URL;
  if (!url) throw new Error('set BENCH_DYNAMODB_URL to a running DynamoDB Local (java -jar DynamoDBLocal.jar -inMemory -port 8000)');
  return url;
}

/** The client options of DynamoDB Local: fixed fake credentials (it checks none), one attempt. */
export function clientOptions() {
  return { endpoint: endpoint(), region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1 };
}

/** bench:ours-dynamodb-fn: -> bench_ours_dynamodb_fn_<time>: a table no earlier start used. */
export function tableOf(keyPrefix) {
  return `${keyPrefix.replace(/:+$/, '').replace(/[^A-Za-z0-9_]/g, '_').slice(0, 200)}_${Date.now()}`;
}

/** The constant fake Lambda context (outside Lambda there is none). */
export const CONTEXT = Object.freeze({ functionName: 'payments', getRemainingTimeInMillis: () => 30_000 });

/**
 * Counts the requests `client` sends, by command; logged at close, so the server log of each column holds
 * its totals (the harness's workloads are not told apart here: bench/peer-columns/dynamodb-round-trips.mjs
 * counts per new key and per replay).
 */
export function countRequests(client, label) {
  const sent = new Map();
  client.middlewareStack.add(
    (next, context) => (args) => {
      sent.set(context.commandName, (sent.get(context.commandName) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'benchCountRequests' },
  );
  return () => process.stderr.write(`[${label}] DynamoDB requests: ${JSON.stringify(Object.fromEntries(sent))}\n`);
}

/** The HTTP status of a thrown error, for either library (by `code` for retrysafe, `name` for powertools). */
export function statusOf(err) {
  const code = err?.code ?? '';
  const name = err?.name ?? '';
  if (code === 'idempotency-request-in-progress' || name === 'IdempotencyAlreadyInProgressError') return 409;
  if (code === 'idempotency-key-reused' || name === 'IdempotencyValidationError') return 422;
  if (code === 'idempotency-key-missing' || name === 'IdempotencyKeyError') return 400;
  return 500;
}

/** Fastify POST /payments awaiting `invoke(event)`; 201 with its result, or the error's status. */
export async function serve(Fastify, ctx, invoke) {
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 }); // as the bare-fastify floor
  app.post('/payments', async (req, reply) => {
    try {
      const result = await invoke({ idempotencyKey: req.headers['idempotency-key'], body: req.body });
      reply.code(201);
      return result;
    } catch (err) {
      reply.code(statusOf(err));
      return { error: err?.name || 'Error', message: err?.message };
    }
  });
  await app.listen({ port: ctx.port, host: ctx.host });
  return app;
}
