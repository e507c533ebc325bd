/**
 * The agent plane (HTTPS): one writing route and the party-scoped reads.
 *
 * POST /api/v1/intents does everything that is not deterministic before proposing:
 * schema and agent URI, the attestation against the wall clock, the binding, the
 * capability, the idempotent replay (of a record the cache holds) and the policy pin
 * against local state, and the hash of the justification (the text itself is never
 * stored). The operation then carries only verified facts; the commit point judges it
 * again against the state at its place in the log.
 *
 * Reads are scoped to the attested party: another party's transaction, account or
 * usage balance answers exactly what a missing one answers.
 */
import express, { type Request, type Response } from 'express';
import {
  AGENT_URI, AccountId, TransactionId, UsageId, accountView, grantingCapability, obligationView, outcomeView, outcomeWithHash, parseWith,
  pinFailure, policyView, sha256Hex, transactionView, usageReport,
  type Applied, type IntentResult, type Operation,
} from '@apl/core';
import { z } from 'zod';
import type { Attested, Attestor } from './attest.js';
import { ApiError } from './errors.js';
import { errorHandler, jsonBody, notFound, observe, parseRequest, sendJson } from './http.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import { PAGE_LIMIT_DEFAULT, type Queries } from './queries.js';
import type { RateLimiter } from './rate-limit.js';
import { intentEnvelope, PageQuery, type IntentEnvelope } from './wire.js';

/** What the gateway needs from the node it runs on. */
export interface GatewayNode {
  /** Reads of the replica's applied state. */
  queries: Queries;
  /** Proposes an operation (forwarding it to the primary if need be) and resolves with its result here. */
  submit(op: Operation): Promise<Applied>;
  /** Resolves once local state reflects every write committed before the call. */
  readBarrier(): Promise<void>;
  /** Whether this replica is the primary (its state is current for every write it proposes). */
  isPrimary(): boolean;
  health(): { ready: boolean; detail: Record<string, unknown> };
}

export interface GatewayOptions {
  node: GatewayNode;
  attestor: Attestor;
  /** rateLimit holds each attested agent to its share of the intent route. */
  rateLimit: RateLimiter;
  bodyBytesMax: number;
  entriesPerIntentMax: number;
  openapi: string;
  log: Logger;
  metrics: Metrics;
}

// Path parameters, held to the same field schemas as the log's records.
const TransactionParam = z.strictObject({ txn_id: TransactionId });
const AccountParam = z.strictObject({ id: AccountId });
const ReadQuery = z.strictObject({ consistency: z.enum(['linearizable', 'local'], { error: 'must be linearizable or local' }).optional() });
const UsageQuery = ReadQuery.extend({ format: z.enum(['json', 'text'], { error: 'must be json or text' }).optional() });
const ObligationsQuery = ReadQuery.extend({
  state: z.enum(['owed', 'open', 'breached', 'discharged', 'all'], { error: 'must be owed, open, breached, discharged or all' }).optional(),
  ...PageQuery.shape,
});

export function agentApp(o: GatewayOptions): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(observe('agent', o.log, o.metrics));
  const envelope = intentEnvelope(o.entriesPerIntentMax);

  app.get('/healthz', (_req, res) => sendJson(res, 200, { status: 'ok' }));
  app.get('/readyz', (_req, res) => {
    const h = o.node.health();
    sendJson(res, h.ready ? 200 : 503, { status: h.ready ? 'ready' : 'not ready', ...h.detail });
  });
  app.get('/api/openapi.json', (_req, res) => {
    res.status(200).type('application/json; charset=utf-8').send(o.openapi);
  });

  app.post('/api/v1/intents', ...jsonBody(o.bodyBytesMax), async (req, res) => {
    if (req.body === undefined) throw new ApiError('malformed_request', 'The intent envelope is required.', { issues: [{ path: '', message: 'is required' }] });
    // An agent out of tokens is refused before its envelope is validated and its
    // attestation verified, so that a flood costs the node little; nothing is taken
    // here, so naming another agent cannot spend its tokens (see submitIntent).
    const claimed = req.body !== null && typeof req.body === 'object' ? (req.body as { agent?: unknown }).agent : undefined;
    if (typeof claimed === 'string') await refuseRate(o.rateLimit, claimed, o.rateLimit.wait(claimed), res);
    const env = parseRequest(envelope, req.body, 'intent envelope');
    res.locals.transaction = env.transaction;
    await submitIntent(o, env, res);
  });

  app.get('/api/v1/transactions/:txn_id', async (req, res) => {
    const { txn_id: id } = parseRequest(TransactionParam, req.params, 'transaction id');
    const { party } = await reader(o, req, res, ReadQuery);
    // Transaction ids are scoped per party: the key holds the caller's party.
    const r = await o.node.queries.transaction(party, id);
    if (!r) throw new ApiError('unknown_transaction', `No transaction ${id} is visible to this agent.`);
    sendJson(res, 200, transactionView(r));
  });

  app.get('/api/v1/accounts/:id/balance', async (req, res) => {
    const { id } = parseRequest(AccountParam, req.params, 'account id');
    const { party } = await reader(o, req, res, ReadQuery);
    const a = await o.node.queries.account(id);
    if (!a || a.party !== party) throw new ApiError('unknown_account', `No account ${id} is visible to this agent.`);
    sendJson(res, 200, accountView(a));
  });

  app.get('/api/v1/obligations', async (req, res) => {
    const { party, query } = await reader(o, req, res, ObligationsQuery);
    const page = await o.node.queries.obligations(party, query.state ?? 'owed', { after: query.after, limit: query.limit ?? PAGE_LIMIT_DEFAULT });
    sendJson(res, 200, { party, tick: await o.node.queries.tick(), obligations: page.items.map(obligationView), next: page.next });
  });

  app.get('/api/v1/policies/active', async (req, res) => {
    await reader(o, req, res, ReadQuery);
    const active = await o.node.queries.activePolicyId();
    const p = active === null ? undefined : await o.node.queries.policy(active);
    if (!p) throw new ApiError('unknown_policy', 'No policy is in force.');
    sendJson(res, 200, policyView(p));
  });

  app.get('/api/v1/usages/:id', async (req, res) => {
    const id = req.params.id!;
    if (!parseWith(UsageId, id).ok) throw new ApiError('invalid_usage_id', `${JSON.stringify(id)} is not a usage-balance id (usage_<id>).`);
    const { party, query } = await reader(o, req, res, UsageQuery);
    const u = await o.node.queries.usage(id);
    // One answer for a balance of another party, a balance with no owner and one never opened.
    if (!u || u.owner === null || u.owner !== party) throw new ApiError('unknown_usage', `No usage balance ${id} is visible to this agent.`);
    const report = usageReport(u);
    if (query.format === 'text') res.status(200).type('text/plain; charset=utf-8').send(report.text);
    else sendJson(res, 200, report);
  });

  app.use(notFound);
  app.use(errorHandler(o.log));
  return app;
}

async function submitIntent(o: GatewayOptions, env: IntentEnvelope, res: Response): Promise<void> {
  if (!AGENT_URI.test(env.agent)) {
    throw new ApiError('invalid_agent_uri', `${JSON.stringify(env.agent)} is not an agent URI (agent://<authority>/agent/<agent_id>).`);
  }
  if (env.attestation === undefined || env.attestation === '') throw new ApiError('unknown_agent', 'No attestation was presented.');
  const checked = await precheck(o, env, res);
  if (checked === null) return;
  const { attested, party } = checked;

  const op: Operation = {
    type: 'SubmitIntent',
    v: 1,
    transaction: env.transaction,
    agent: env.agent,
    entries: env.entries,
    ...(env.consume_usage ? { consume_usage: env.consume_usage } : {}),
    ...(env.meter_usage ? { meter_usage: env.meter_usage } : {}),
    ...(env.bill_usage ? { bill_usage: env.bill_usage } : {}),
    action: env.action,
    evidence: env.evidence,
    justification_hash: sha256Hex(env.justification),
    policy: env.policy,
    authority: {
      issuer: attested.issuer,
      key_id: attested.key_id,
      token_id: attested.token_id,
      capabilities: attested.capabilities,
    },
  };
  await answerIntent(res, await o.node.submit(op), o.node.queries, party);
}

/**
 * The checks against local state before proposing. A follower's state may lag the
 * primary's (a binding or a policy made a moment ago), so a follower that would refuse
 * catches up first (a read barrier) and checks again: a refusal is never an artefact
 * of lag. Answers null when a replay was answered.
 */
async function precheck(o: GatewayOptions, env: IntentEnvelope, res: Response): Promise<{ attested: Attested; party: string } | null> {
  try {
    return await precheckOnce(o, env, res, true);
  } catch (err) {
    if (!(err instanceof ApiError) || o.node.isPrimary() || !LAG_SENSITIVE.has(err.body.error)) throw err;
    await o.node.readBarrier();
    return precheckOnce(o, env, res, false);
  }
}

/** The refusals local state decides, which a lagging follower must confirm. */
const LAG_SENSITIVE = new Set(['attestation', 'unknown_agent', 'stale_policy', 'no_active_policy']);

/** `first`: the agent's rate is charged on the first pass only, not on the check after a barrier. */
async function precheckOnce(o: GatewayOptions, env: IntentEnvelope, res: Response, first: boolean): Promise<{ attested: Attested; party: string } | null> {
  const attested = await attest(o, env.attestation!);
  if (attested.subject !== env.agent) throw new ApiError('attestation', 'The attestation was rejected: its subject is not this agent.');
  if (first) await limitRate(o.rateLimit, env.agent, res);
  const q = o.node.queries;
  const party = await q.agentParty(env.agent);
  if (party === undefined) throw new ApiError('unknown_agent', `The agent ${env.agent} is not bound to a party.`);
  if (grantingCapability(attested.capabilities, env.action.action) === null) {
    throw new ApiError('capability_mapping', `The attestation grants no capability for action ${env.action.action}.`);
  }
  // The commit point replays a recorded transaction (idempotency is its first check),
  // so here the store is read only where it pays: a record the cache holds is answered
  // at once, and where the pin fails the store is read, since a replay wins over a
  // stale pin. A new transaction id costs no disk read that would find nothing.
  const cached = q.cachedTransaction(party, env.transaction);
  if (cached) {
    sendJson(res, 200, outcomeView(cached), { 'Idempotent-Replayed': 'true' });
    return null;
  }
  const active = await q.activePolicyId();
  if (pinFailure(env.policy, active) !== null) {
    const recorded = await q.transaction(party, env.transaction);
    if (recorded) {
      sendJson(res, 200, outcomeView(recorded), { 'Idempotent-Replayed': 'true' });
      return null;
    }
    checkPin(env.policy, active);
  }
  return { attested, party };
}

/** Takes a token of the attested agent's bucket, or throws 429 `rate_limited` with `Retry-After`. */
async function limitRate(limiter: RateLimiter, agent: string, res: Response): Promise<void> {
  await refuseRate(limiter, agent, limiter.take(agent), res);
}

/**
 * Throws 429 `rate_limited` with `Retry-After` when the agent must wait, after holding
 * the refusal for `refusalDelayMs` (at most the wait): a flood that ignores Retry-After
 * then costs the node a refusal per connection per delay, not all its time.
 */
async function refuseRate(limiter: RateLimiter, agent: string, wait: number, res: Response): Promise<void> {
  if (wait === 0) return;
  res.setHeader('Retry-After', String(wait));
  const { ratePerSecond, burst, refusalDelayMs } = limiter.o;
  await hold(res, Math.min(refusalDelayMs, wait * 1000));
  throw new ApiError('rate_limited', `The agent ${agent} is sending intents faster than this node accepts from one agent (${ratePerSecond} a second, bursts of ${burst}); nothing was recorded. Retry after ${wait} s.`);
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

/** Verifies an attestation, or throws 403 `attestation`. */
async function attest(o: GatewayOptions, token: string): Promise<Attested> {
  const v = await o.attestor.verify(token);
  if (!v.ok) throw new ApiError('attestation', v.message);
  return v.attested;
}

/**
 * The gateway's pin check before proposing, on every replica: `stale_policy` (the
 * commit point's own check, run before proposing, where a mismatch is named so), or
 * `no_active_policy`. A replica's state may lag; the commit point checks again.
 */
function checkPin(pinned: string, active: string | null): void {
  const failure = pinFailure(pinned, active);
  if (failure === null) return;
  const { error, message, ...extra } = failure.error;
  throw new ApiError(error === 'policy_pin_mismatch' ? 'stale_policy' : error, message, extra);
}

/**
 * Answers a judged intent: the recorded outcome with its entry hash, as the result
 * gives it; or, for a replay, the outcome recorded earlier, read back.
 */
async function answerIntent(res: Response, applied: Applied, q: Queries, party: string): Promise<void> {
  if (!applied.result.ok) throw ApiError.from(applied.result.error);
  const v = applied.result.value as IntentResult;
  if (v.kind === 'recorded') return sendJson(res, 200, outcomeWithHash(v.outcome, applied.entry_hash!));
  const record = await q.transaction(party, v.transaction);
  if (!record) throw new ApiError('commit_unavailable', 'The replayed transaction could not be read back; read it with GET /api/v1/transactions.');
  sendJson(res, 200, outcomeView(record), { 'Idempotent-Replayed': 'true' });
}

/**
 * Authenticates a party-scoped read and makes local state current: the attestation
 * comes as `Authorization: Bearer <token>`, and the agent is the token's `sub`. The
 * binding is looked up after the read barrier, so a binding made just before is seen.
 */
async function reader<S extends z.ZodType>(o: GatewayOptions, req: Request, res: Response, schema: S): Promise<{ party: string; query: z.output<S> }> {
  const query = parseRequest(schema, { ...(req.query as Record<string, unknown>) }, 'query');
  const header = req.headers.authorization;
  const m = header === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!m) throw new ApiError('unknown_agent', 'No attestation was presented (Authorization: Bearer <attestation>).');
  const local = (query as { consistency?: string }).consistency === 'local';
  if (!local) await o.node.readBarrier();
  const attested = await attest(o, m[1]!);
  res.set('Consistency', local ? 'local' : 'linearizable');
  const party = await o.node.queries.agentParty(attested.subject);
  if (party === undefined) throw new ApiError('unknown_agent', `The agent ${attested.subject} is not bound to a party.`);
  return { party, query };
}
