/**
 * The agent plane's front end alone, for `npm run bench -- frontend`: the node's own
 * HTTPS listener (limits and TLS as the node sets them), Express, the request line and
 * metrics of every request, the body read and parsed losslessly, the envelope, path and
 * Authorization header checked with the gateway's schemas, and a JSON answer written as
 * the gateway writes it. In place of the ledger it answers each request with an answer
 * the node gave to a request of the same kind, read from the file it is started with.
 * What this process spends per request is what a front end on a thread of its own could
 * take off the thread that runs Raft and `apply`, at most.
 *
 *   node frontend-server.js <answers.json> <cert.pem> <key.pem>
 *
 * It logs `{"event":"frontend_started","port":N}` once it listens on 127.0.0.1.
 */
import { readFileSync } from 'node:fs';
import express from 'express';
import { z } from 'zod';
import { AccountId, TransactionId, parseJson } from '@apl/core';
import { ConfigSchema, Metrics, createLogger, errorHandler, intentEnvelope, jsonBody, limitedServer, notFound, observe, parseRequest, sendJson } from '@apl/node';
import { FRONTEND_KINDS, type FrontendKind } from './frontend-kinds.js';

const [answersFile, certFile, keyFile] = process.argv.slice(2);
if (!answersFile || !certFile || !keyFile) {
  process.stderr.write('usage: node frontend-server.js <answers.json> <cert.pem> <key.pem>\n');
  process.exit(2);
}
/** An answer per kind of request, parsed once (128-bit integers stay exact), serialized per request as the gateway does. */
const answers = new Map<FrontendKind, unknown>();
const given = JSON.parse(readFileSync(answersFile, 'utf8')) as Record<string, string>;
for (const kind of FRONTEND_KINDS) {
  if (given[kind] === undefined) throw new Error(`${answersFile} has no answer for ${kind}`);
  answers.set(kind, parseJson(given[kind]));
}

const config = ConfigSchema.parse({});
const log = createLogger('info', 'frontend');
const metrics = new Metrics();
const envelope = intentEnvelope(config.limits.entries_per_intent_max);
const TransactionParam = z.strictObject({ txn_id: TransactionId });
const AccountParam = z.strictObject({ id: AccountId });

/** The kind of answer the node gave an envelope like this one (support/workload.ts's mix). */
function kindOf(env: z.output<typeof envelope>): FrontendKind {
  switch (env.action.action) {
    case 'purchase.book':
      return env.entries.some((e) => BigInt(e.amount.minor) > 500_000n) ? 'forbidden' : 'purchase';
    case 'receipt.attach':
      return 'receipt';
    case 'usage.record':
      return 'usage';
    default:
      return 'denied';
  }
}

/** The gateway's reading of `Authorization: Bearer <attestation>` (every read of the mix has one). */
function bearer(header: string | undefined): void {
  if (header === undefined || !/^Bearer\s+(\S+)\s*$/i.test(header)) throw new Error('a read without an attestation');
}

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.use(observe('agent', log, metrics));
app.post('/api/v1/intents', ...jsonBody(config.limits.body_bytes_max), (req, res) => {
  const env = parseRequest(envelope, req.body, 'intent envelope');
  res.locals.transaction = env.transaction;
  sendJson(res, 200, answers.get(kindOf(env)));
});
app.get('/api/v1/transactions/:txn_id', (req, res) => {
  parseRequest(TransactionParam, req.params, 'transaction id');
  bearer(req.headers.authorization);
  res.set('Consistency', 'linearizable');
  sendJson(res, 200, answers.get('transaction'));
});
app.get('/api/v1/accounts/:id/balance', (req, res) => {
  parseRequest(AccountParam, req.params, 'account id');
  bearer(req.headers.authorization);
  res.set('Consistency', 'linearizable');
  sendJson(res, 200, answers.get('balance'));
});
app.use(notFound);
app.use(errorHandler(log));

const server = limitedServer({ cert: readFileSync(certFile), key: readFileSync(keyFile), minVersion: 'TLSv1.2' }, config.http);
server.on('request', app);
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  log.info({ event: 'frontend_started', port: typeof address === 'object' && address !== null ? address.port : null }, 'front end listening');
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
