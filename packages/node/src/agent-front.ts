/**
 * The agent plane's front end: everything of a request that needs no state. The body
 * is read and parsed losslessly, the envelope, the path parameters and the query are
 * held to their schemas, the form of `Authorization: Bearer <attestation>` is checked,
 * and each request is logged and counted once. What is left goes to the backend
 * (gateway.ts) as one call, and its answer is written as it comes.
 *
 * It runs on a thread of its own (agent-thread.ts), so that the thread that runs Raft
 * and `apply` spends nothing on TLS, HTTP or parsing; `agent_plane_thread: false`
 * runs it on the node's own thread, calling the backend directly.
 */
import type { Express, Request, Response } from 'express';
import { AccountId, TransactionId, UsageId, parseWith } from '@apl/core';
import { z } from 'zod';
import { ApiError } from './errors.js';
import type { AgentBackend, Answer, ReadCall } from './gateway.js';
import { bearerToken, errorHandler, JSON_TYPE, jsonBody, noQuery, notFound, parseRequest, planeApp, queryOf, sendText, type HttpMetrics } from './http.js';
import type { Logger } from './log.js';
import { ObligationCursor, ReadQuery, intentEnvelope, pageQuery } from './wire.js';

export interface FrontEndOptions {
  backend: AgentBackend;
  bodyBytesMax: number;
  entriesPerIntentMax: number;
  /** The agent plane's OpenAPI document, naming the address this plane listens on. */
  openapi: string;
  log: Logger;
  metrics: HttpMetrics;
}

// Path parameters, held to the same field schemas as the log's records.
const TransactionParam = z.strictObject({ txn_id: TransactionId });
const AccountParam = z.strictObject({ id: AccountId });
const UsageQuery = ReadQuery.extend({ format: z.enum(['json', 'text'], { error: 'must be json or text' }).optional() });
const ObligationsQuery = pageQuery(ObligationCursor, 'an obligation id').extend({
  state: z.enum(['owed', 'open', 'breached', 'discharged', 'all'], { error: 'must be owed, open, breached, discharged or all' }).optional(),
}).superRefine((q, ctx) => {
  // What is owed is answered whole: a page size or cursor there would be silently moot.
  if ((q.state ?? 'owed') !== 'owed') return;
  for (const key of ['limit', 'after'] as const) {
    if (q[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: 'pages the states open, breached, discharged and all; what is owed (the default state) is answered whole, at most 256 obligations in one page' });
  }
});

export function agentFrontEnd(o: FrontEndOptions): Express {
  const app = planeApp('agent', o.log, o.metrics);
  const envelope = intentEnvelope(o.entriesPerIntentMax);
  const b = o.backend;

  app.get('/healthz', async (_req, res) => write(res, await b.health('healthz')));
  app.get('/readyz', async (_req, res) => write(res, await b.health('readyz')));
  app.get('/api/openapi.json', (_req, res) => {
    res.status(200).type(JSON_TYPE).send(o.openapi);
  });

  app.post('/api/v1/intents', noQuery, ...jsonBody(o.bodyBytesMax), async (req, res) => {
    if (req.body === undefined) throw new ApiError('malformed_request', 'The intent envelope is required.', { issues: [{ path: '', message: 'is required' }] });
    // The agent the body names, checked against its rate before anything else (gateway.ts).
    const agent = req.body !== null && typeof req.body === 'object' ? (req.body as { agent?: unknown }).agent : undefined;
    const claimed = typeof agent === 'string' ? agent : null;
    const parsed = parseWith(envelope, req.body);
    if (parsed.ok) res.locals.transaction = parsed.value.transaction;
    await write(res, await b.intent(parsed.ok ? { claimed, envelope: parsed.value } : { claimed, issues: parsed.issues }));
  });

  app.get('/api/v1/transactions/:txn_id', async (req, res) => {
    const { txn_id: id } = parseRequest(TransactionParam, req.params, 'transaction id');
    await write(res, await b.read({ route: 'transaction', id, ...reader(req, ReadQuery) }));
  });

  app.get('/api/v1/accounts/:id/balance', async (req, res) => {
    const { id } = parseRequest(AccountParam, req.params, 'account id');
    await write(res, await b.read({ route: 'balance', id, ...reader(req, ReadQuery) }));
  });

  app.get('/api/v1/obligations', async (req, res) => {
    await write(res, await b.read({ route: 'obligations', ...reader(req, ObligationsQuery) }));
  });

  app.get('/api/v1/policies/active', async (req, res) => {
    await write(res, await b.read({ route: 'policy', ...reader(req, ReadQuery) }));
  });

  app.get('/api/v1/usages/:id', async (req, res) => {
    const id = req.params.id!;
    if (!parseWith(UsageId, id).ok) throw new ApiError('invalid_usage_id', `${JSON.stringify(id)} is not a usage-balance id (usage_<id>).`);
    await write(res, await b.read({ route: 'usage', id, ...reader(req, UsageQuery) }));
  });

  app.use(notFound);
  app.use(errorHandler(o.log));
  return app;
}

/**
 * The query of a party-scoped read, held to its schema, and the attestation it comes
 * with as `Authorization: Bearer <attestation>` (the agent is the token's `sub`).
 */
function reader<S extends z.ZodType<ReadCall['query']>>(req: Request, schema: S): { query: z.output<S>; token: string } {
  const query = parseRequest(schema, queryOf(req), 'query');
  const token = bearerToken(req, (why) => new ApiError('unknown_agent', `No attestation was read: ${why} (Authorization: Bearer <attestation>).`));
  if (token === null) throw new ApiError('unknown_agent', 'No attestation was presented (Authorization: Bearer <attestation>).');
  return { query, token };
}

/** Writes the backend's answer, after holding it as it asks (a rate refusal). */
async function write(res: Response, a: Answer): Promise<void> {
  if (a.error !== undefined) res.locals.error = a.error;
  if (a.holdMs !== undefined) await hold(res, a.holdMs);
  sendText(res, a.status, a.text, a.type ?? JSON_TYPE, a.headers);
}

/** Resolves after `ms`, or as soon as the client has gone. */
function hold(res: Response, ms: number): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      res.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    res.on('close', done);
  });
}
