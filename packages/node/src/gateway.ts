/**
 * The agent plane's answers that need the node's state: the one writing route and the
 * party-scoped reads. What needs no state (TLS, HTTP, the body and its parse, the
 * schemas of the envelope, the path and the query, the Authorization header's form,
 * the request line) is the front end's (agent-front.ts), which hands each request here
 * as a call and writes the answer it gets back. The front end runs on a thread of its
 * own (agent-thread.ts) or, with `agent_plane_thread: false`, on this one.
 *
 * An intent does everything that is not deterministic before proposing: the agent URI,
 * the attestation against the wall clock, the binding, the capability, the idempotent
 * replay (of a record the cache holds) and the policy pin against local state, and the
 * hash of the justification (the text itself is never stored). The operation then
 * carries only verified facts; the commit point judges it again against the state at
 * its place in the log.
 *
 * Reads are scoped to the attested party: another party's transaction, account or
 * usage balance answers exactly what a missing one answers.
 */
import {
  AGENT_URI, INTENT_VERSION, accountView, grantingCapability, obligationView, outcomeView, outcomeWithHash,
  pinFailure, policyView, sha256Hex, stringifyJson, transactionView, usageReport,
  type Applied, type IntentResult, type Operation,
} from '@apl/core';
import type { Attested, Attestor } from './attest.js';
import { ApiError } from './errors.js';
import type { Logger } from './log.js';
import { PAGE_LIMIT_DEFAULT, type ObligationFilter, type Queries } from './queries.js';
import type { RateLimiter } from './rate-limit.js';
import type { IntentEnvelope } from './wire.js';

/** What the plane needs from the node it runs on. */
export interface GatewayNode {
  /** Reads of the replica's applied state. */
  queries: Queries;
  /** Proposes an operation (forwarding it to the primary if need be) and resolves with its result here. */
  submit(op: Operation): Promise<Applied>;
  /** Resolves once local state reflects every write committed before the call. */
  readBarrier(): Promise<void>;
  /** Throws when this replica serves no reads at all (removed from the group), local ones included. */
  refuseRead(): void;
  /** Whether this replica is the primary (its state is current for every write it proposes). */
  isPrimary(): boolean;
  health(): { ready: boolean; detail: Record<string, unknown> };
}

export interface GatewayOptions {
  node: GatewayNode;
  attestor: Attestor;
  /** rateLimit holds each attested agent to its share of the intent route. */
  rateLimit: RateLimiter;
  log: Logger;
}

/**
 * An answer for the front end to write: the status, the body's text (JSON unless
 * `type` says otherwise) and headers; `error` names the error code for the request
 * line; `holdMs` asks the front end to hold the answer that long, or until the client
 * goes (a rate refusal, see refuseRate).
 */
export interface Answer {
  status: number;
  text: string;
  type?: string;
  headers?: Record<string, string>;
  error?: string;
  holdMs?: number;
}

/**
 * An intent as the front end read it: `claimed` is the body's `agent` when it is a
 * string (checked against the rate limit before anything else); then either the
 * envelope its schema gave, or what the schema found wrong.
 */
export type IntentCall =
  | { claimed: string | null; envelope: IntentEnvelope }
  | { claimed: string | null; issues: { path: string; message: string }[] };

/** The read consistency the query asked for (the front end checked its schema). */
export interface ReadQuery {
  consistency?: 'linearizable' | 'local' | undefined;
}

/**
 * A party-scoped read as the front end read it: the route, its checked parameters and
 * query, and the attestation of `Authorization: Bearer <attestation>`.
 */
export type ReadCall = { token: string; query: ReadQuery } & (
  | { route: 'transaction'; id: string }
  | { route: 'balance'; id: string }
  | { route: 'obligations'; query: { state?: ObligationFilter | undefined; after?: string | undefined; limit?: number | undefined } }
  | { route: 'policy' }
  | { route: 'usage'; id: string; query: { format?: 'json' | 'text' | undefined } }
);

/** The state side of the agent plane: what the front end calls, on this thread or from its own. */
export interface AgentBackend {
  intent(call: IntentCall): Promise<Answer>;
  read(call: ReadCall): Promise<Answer>;
  /** `healthz` (the node's thread answers) or `readyz` (and whether it serves). */
  health(which: 'healthz' | 'readyz'): Promise<Answer>;
}

export function agentBackend(o: GatewayOptions): AgentBackend {
  return {
    intent: (call) => answering('POST /api/v1/intents', o.log, (headers) => intent(o, call, headers)),
    read: (call) => answering(`GET ${call.route}`, o.log, (headers) => read(o, call, headers)),
    health: async (which) => {
      if (which === 'healthz') return json(200, { status: 'ok' });
      const h = o.node.health();
      return json(h.ready ? 200 : 503, { status: h.ready ? 'ready' : 'not ready', ...h.detail });
    },
  };
}

/** Runs a handler; what it throws becomes the answer, with the headers set before it threw. */
async function answering(what: string, log: Logger, handler: (headers: Record<string, string>) => Promise<Answer>): Promise<Answer> {
  const headers: Record<string, string> = {};
  try {
    return await handler(headers);
  } catch (err) {
    const e = err instanceof ApiError ? err : unexpected(what, err, log);
    return { status: e.status, text: stringifyJson(e.body), headers, error: e.body.error, ...(err instanceof HeldRefusal ? { holdMs: err.holdMs } : {}) };
  }
}

function unexpected(what: string, err: unknown, log: Logger): ApiError {
  log.error({ event: 'internal_error', request: what, err: (err as Error)?.stack ?? String(err) }, 'unexpected error');
  return ApiError.internal();
}

function json(status: number, body: unknown, headers?: Record<string, string>): Answer {
  return { status, text: stringifyJson(body), ...(headers ? { headers } : {}) };
}

async function intent(o: GatewayOptions, call: IntentCall, headers: Record<string, string>): Promise<Answer> {
  // An agent out of tokens is refused before its envelope is looked at and its
  // attestation verified, so that a flood costs the node little; nothing is taken
  // here, so naming another agent cannot spend its tokens (see precheckOnce).
  if (call.claimed !== null) refuseRate(o.rateLimit, call.claimed, o.rateLimit.wait(call.claimed), headers);
  if ('issues' in call) throw new ApiError('malformed_request', 'The intent envelope is not valid.', { issues: call.issues });
  const env = call.envelope;
  if (!AGENT_URI.test(env.agent)) {
    throw new ApiError('invalid_agent_uri', `${JSON.stringify(env.agent)} is not an agent URI (agent://<authority>/agent/<agent_id>).`);
  }
  if (env.attestation === undefined || env.attestation === '') throw new ApiError('unknown_agent', 'No attestation was presented.');
  const checked = await precheck(o, env, headers);
  if ('answer' in checked) return checked.answer;
  const { attested, party } = checked;

  const op: Operation = {
    type: 'SubmitIntent',
    v: INTENT_VERSION,
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
  return answerIntent(await o.node.submit(op), o.node.queries, party);
}

type Checked = { attested: Attested; party: string } | { answer: Answer };

/**
 * The checks against local state before proposing. A follower's state may lag the
 * primary's (a binding or a policy made a moment ago), so a follower that would refuse
 * catches up first (a read barrier) and checks again: a refusal is never an artefact
 * of lag. Gives the answer instead when a replay was answered.
 */
async function precheck(o: GatewayOptions, env: IntentEnvelope, headers: Record<string, string>): Promise<Checked> {
  try {
    return await precheckOnce(o, env, headers, true);
  } catch (err) {
    if (!(err instanceof ApiError) || o.node.isPrimary() || !LAG_SENSITIVE.has(err.body.error)) throw err;
    await o.node.readBarrier();
    return precheckOnce(o, env, headers, false);
  }
}

/** The refusals local state decides, which a lagging follower must confirm. */
const LAG_SENSITIVE = new Set(['attestation', 'unknown_agent', 'stale_policy', 'no_active_policy']);

/** `first`: the agent's rate is charged on the first pass only, not on the check after a barrier. */
async function precheckOnce(o: GatewayOptions, env: IntentEnvelope, headers: Record<string, string>, first: boolean): Promise<Checked> {
  const attested = await attest(o, env.attestation!);
  if (attested.subject !== env.agent) throw new ApiError('attestation', 'The attestation was rejected: its subject is not this agent.');
  if (first) refuseRate(o.rateLimit, env.agent, o.rateLimit.take(env.agent), headers);
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
  if (cached) return { answer: json(200, outcomeView(cached), { 'Idempotent-Replayed': 'true' }) };
  const active = await q.activePolicyId();
  if (pinFailure(env.policy, active) !== null) {
    const recorded = await q.transaction(party, env.transaction);
    if (recorded) return { answer: json(200, outcomeView(recorded), { 'Idempotent-Replayed': 'true' }) };
    checkPin(env.policy, active);
  }
  return { attested, party };
}

/** A rate refusal, answered only after the front end has held it for `holdMs`. */
class HeldRefusal extends ApiError {
  constructor(message: string, readonly holdMs: number) {
    super('rate_limited', message);
  }
}

/**
 * Throws 429 `rate_limited` with `Retry-After` when the agent must wait, to be held for
 * `refusalDelayMs` (at most the wait) before it is answered: a flood that ignores
 * Retry-After then costs the node a refusal per connection per delay, not all its time.
 */
function refuseRate(limiter: RateLimiter, agent: string, wait: number, headers: Record<string, string>): void {
  if (wait === 0) return;
  headers['Retry-After'] = String(wait);
  const { ratePerSecond, burst, refusalDelayMs } = limiter.o;
  throw new HeldRefusal(`The agent ${agent} is sending intents faster than this node accepts from one agent (${ratePerSecond} a second, bursts of ${burst}); nothing was recorded. Retry after ${wait} s.`, Math.min(refusalDelayMs, wait * 1000));
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
async function answerIntent(applied: Applied, q: Queries, party: string): Promise<Answer> {
  if (!applied.result.ok) throw ApiError.from(applied.result.error);
  const v = applied.result.value as IntentResult;
  if (v.kind === 'recorded') return json(200, outcomeWithHash(v.outcome, applied.entry_hash!));
  const record = await q.transaction(party, v.transaction);
  if (!record) throw new ApiError('commit_unavailable', 'The replayed transaction could not be read back; read it with GET /api/v1/transactions.');
  return json(200, outcomeView(record), { 'Idempotent-Replayed': 'true' });
}

async function read(o: GatewayOptions, call: ReadCall, headers: Record<string, string>): Promise<Answer> {
  const party = await reader(o, call, headers);
  const q = o.node.queries;
  switch (call.route) {
    case 'transaction': {
      // Transaction ids are scoped per party: the key holds the caller's party.
      const r = await q.transaction(party, call.id);
      if (!r) throw new ApiError('unknown_transaction', `No transaction ${call.id} is visible to this agent.`);
      return json(200, transactionView(r), headers);
    }
    case 'balance': {
      const a = await q.account(call.id);
      if (!a || a.party !== party) throw new ApiError('unknown_account', `No account ${call.id} is visible to this agent.`);
      return json(200, accountView(a), headers);
    }
    case 'obligations': {
      const page = await q.obligations(party, call.query.state ?? 'owed', { after: call.query.after, limit: call.query.limit ?? PAGE_LIMIT_DEFAULT });
      return json(200, { party, tick: await q.tick(), obligations: page.items.map(obligationView), next: page.next }, headers);
    }
    case 'policy': {
      const active = await q.activePolicyId();
      const p = active === null ? undefined : await q.policy(active);
      if (!p) throw new ApiError('unknown_policy', 'No policy is in force.');
      return json(200, policyView(p), headers);
    }
    case 'usage': {
      const u = await q.usage(call.id);
      // One answer for a balance of another party, a balance with no owner and one never opened.
      if (!u || u.owner === null || u.owner !== party) throw new ApiError('unknown_usage', `No usage balance ${call.id} is visible to this agent.`);
      const report = usageReport(u);
      if (call.query.format === 'text') return { status: 200, text: report.text, type: 'text/plain; charset=utf-8', headers };
      return json(200, report, headers);
    }
  }
}

/**
 * Authenticates a party-scoped read and makes local state current: the agent is the
 * attestation's `sub`. The binding is looked up after the read barrier, so a binding
 * made just before is seen. Answers the attested agent's party.
 */
async function reader(o: GatewayOptions, call: ReadCall, headers: Record<string, string>): Promise<string> {
  o.node.refuseRead();
  const local = call.query.consistency === 'local';
  if (!local) await o.node.readBarrier();
  const attested = await attest(o, call.token);
  headers.Consistency = local ? 'local' : 'linearizable';
  const party = await o.node.queries.agentParty(attested.subject);
  if (party === undefined) throw new ApiError('unknown_agent', `The agent ${attested.subject} is not bound to a party.`);
  return party;
}
