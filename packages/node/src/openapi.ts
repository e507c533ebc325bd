/**
 * The published contract: one OpenAPI 3.1 document per plane, generated from the
 * zod schemas the planes parse and answer with. The documents are committed
 * (packages/node/openapi/*.json) and a test fails when the generated ones differ,
 * until `npm run openapi` regenerates them on purpose; `npm test` lints them with
 * Redocly's recommended rules (redocly.yaml). A live node serves them as committed,
 * except that `servers` names the node's own address (`withServer`).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { LIMITS, REQUIRED_ROLES, parseJson, stringifyJson, type AdminOperation } from '@apl/core';
import { ConfigSchema } from './config.js';
import { STATUS, type ErrorCode } from './errors.js';
import * as w from './wire.js';

type Schemas = Record<string, z.ZodType>;
type Json = Record<string, unknown>;

/** The configuration a node has unless told otherwise: its limits and its development addresses. */
const DEFAULTS = ConfigSchema.parse({});
const LIMIT_DEFAULTS = DEFAULTS.limits;
const RATE_DEFAULTS = DEFAULTS.rate_limit;

/** The address of each plane of a development node with the default configuration (`npm start`). */
export const DEFAULT_SERVER_URLS = {
  agent: `https://${DEFAULTS.host}:${DEFAULTS.agent_port}`,
  admin: `https://${DEFAULTS.host}:${DEFAULTS.admin_port}`,
};

/** The repository's package.json, whose license the documents publish. */
const ROOT_PACKAGE = fileURLToPath(new URL('../../../package.json', import.meta.url));

/** The project's license as an OpenAPI 3.1 License Object (an SPDX identifier). */
function license(): Json {
  const { license: spdx } = JSON.parse(readFileSync(ROOT_PACKAGE, 'utf8')) as { license: string };
  return { name: spdx, identifier: spdx };
}

const servers = (url: string, description: string) => [{ url, description }];

/**
 * A committed document as a live node serves it: the same contract, with `servers`
 * naming the address the node really listens on. Called once when the node starts;
 * each request is then answered with the string it returns.
 */
export function withServer(document: string, url: string, limits?: { entriesPerIntentMax: number }): string {
  const doc = parseJson(document) as Json;
  doc.servers = servers(url, 'The node that served this document.');
  // The agent plane's limit of legs is this node's setting (limits.entries_per_intent_max),
  // at most the committed document's: a client that validates against the document served
  // is refused no envelope the document admits.
  const entries = ((doc.components as Json | undefined)?.schemas as Json | undefined)?.IntentEnvelope as Json | undefined;
  const legs = (entries?.properties as Json | undefined)?.entries as Json | undefined;
  if (limits !== undefined && legs !== undefined && typeof legs.maxItems === 'number') legs.maxItems = Math.min(legs.maxItems, limits.entriesPerIntentMax);
  return `${stringifyJson(doc, 2)}\n`;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** Drops the input half of integer unions (`number | bigint`): on the wire both are one JSON integer. */
const override: NonNullable<Parameters<typeof z.toJSONSchema>[1]>['override'] = (ctx) => {
  const s = ctx.jsonSchema as Json;
  if (s.type === 'integer' && Array.isArray(s.anyOf)) delete s.anyOf;
};

/**
 * Writes 128-bit bounds exactly: zod keeps them as doubles, which round 2^127 - 1 up to
 * 2^127, so a validator would admit 2^127; the schema carries the exact ones as text
 * (core `bigIntIn`), and the document holds them as bigints, written as bare integers.
 */
function exactBounds(node: unknown): void {
  if (node === null || typeof node !== 'object') return;
  if (Array.isArray(node)) {
    for (const item of node) exactBounds(item);
    return;
  }
  const s = node as Json;
  const range = s['x-exact-range'];
  if (Array.isArray(range)) {
    s.minimum = BigInt(range[0] as string);
    s.maximum = BigInt(range[1] as string);
    delete s['x-exact-range'];
  }
  for (const v of Object.values(s)) exactBounds(v);
}

function components(inputs: Schemas, outputs: Schemas): Json {
  const out: Json = {};
  for (const [io, set] of [['input', inputs], ['output', outputs]] as const) {
    const reg = z.registry<{ id: string }>();
    for (const [id, schema] of Object.entries(set)) reg.add(schema, { id });
    const doc = z.toJSONSchema(reg, { target: 'draft-2020-12', io, unrepresentable: 'any', uri: (id) => `#/components/schemas/${id}`, override });
    for (const [id, schema] of Object.entries(doc.schemas)) {
      const { $schema: _s, $id: _i, ...rest } = schema as Json;
      exactBounds(rest);
      out[id] = rest;
    }
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

// Where each refusal comes from, read off the code that answers it. A route's
// responses are the union of the sources its request passes through, so each route
// declares every 4xx (and the 503) it can really answer, and each status names its
// codes. The integration tests check every error they receive against that list.

/**
 * Every route: a request Node's HTTP parser cannot read (a bad request line, headers
 * over the limit) is answered 400 before any route sees it (listener.ts), and so is a
 * path whose percent-encoding is broken (http.ts); one not all in within the
 * listener's timeouts is answered 408 and its connection closed, and one with an
 * `Expect` other than 100-continue 417 (listener.ts), and one in an HTTP version other
 * than 1.0 or 1.1 505 (http.ts). A method the path is not served
 * with is answered 405 with Allow (http.ts notFound): it is no operation of this
 * document, so no operation lists it.
 */
const UNREADABLE: ErrorCode[] = ['malformed_request', 'request_timeout', 'expectation_failed', 'http_version_not_supported'];
/** A JSON body (http.ts jsonBody): not JSON, not application/json, or over limits.body_bytes_max. */
const BODY: ErrorCode[] = ['malformed_request', 'payload_too_large'];
/**
 * A write through the log (node.ts submit, replica.ts propose): this replica is not
 * the primary; certainly not recorded (proposals over the limit, the node stopping,
 * its log failed); recorded or not, the commit unconfirmed in time; an operation the
 * log could not read back.
 */
const PROPOSAL: ErrorCode[] = ['malformed_request', 'not_primary', 'gateway_error', 'commit_unavailable'];
/**
 * A linearizable read (replica.ts readBarrier): no primary known to this replica (a
 * follower in an election), the node stopping or failed, or the read unconfirmed in time.
 */
const BARRIER: ErrorCode[] = ['not_primary', 'gateway_error', 'commit_unavailable'];
/** An agent-plane read (gateway.ts reader): its query, the bearer attestation, the agent's binding, the barrier. */
const AGENT_READ: ErrorCode[] = ['malformed_request', 'unknown_agent', 'attestation', ...BARRIER];
/**
 * Every /admin/v1 route: the admin token, and a principal whose only role is `feed`,
 * which may read the change feed and nothing else (admin-plane.ts, roles.ts).
 */
const ADMIN: ErrorCode[] = ['unauthorized', 'forbidden'];
/** An admin read: the token, then the barrier (skipped with consistency=local). */
const ADMIN_READ: ErrorCode[] = [...ADMIN, ...BARRIER];
/** An admin mutation (admin-plane.ts mutate): the token, the role (at the gateway, and with four eyes at the commit point), the proposal. */
const ADMIN_WRITE: ErrorCode[] = [...ADMIN, 'forbidden', ...PROPOSAL];

/** The error responses of a route, one per status, each naming and admitting only its codes. */
function errors(...sources: ErrorCode[][]): Json {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const c of new Set([...UNREADABLE, ...sources.flat()])) byStatus.set(STATUS[c], [...(byStatus.get(STATUS[c]) ?? []), c]);
  return Object.fromEntries([...byStatus].sort(([a], [b]) => a - b).map(([status, cs]) => [String(status), {
    description: cs.map((c) => `\`${c}\``).join(', '),
    content: { 'application/json': { schema: { allOf: [ref('Error'), { properties: { error: { enum: cs } } }] } } },
  }]));
}

/** The 429 of a rate-limited route says when to come back. */
function retryAfter(responses: Json): Json {
  const tooMany = responses['429'] as Json | undefined;
  if (tooMany === undefined) return responses;
  return { ...responses, 429: { ...tooMany, headers: { 'Retry-After': { description: 'Seconds to wait before this agent sends again.', schema: { type: 'integer', minimum: 1 } } } } };
}

const json = (name: string, description: string) => ({ description, content: { 'application/json': { schema: ref(name) } } });
/** Who may propose an admin operation, as the commit point checks it: "(operator or author)". */
const by = (type: AdminOperation['type']) => `(${REQUIRED_ROLES[type].join(' or ')})`;
/** The answer of a read that takes `consistency`: it says which it served. */
const consistent = (response: Json): Json => ({
  ...response,
  headers: { Consistency: { description: 'linearizable or local: the consistency this read was served with.', required: true, schema: { type: 'string', enum: ['linearizable', 'local'] } } },
});
const body = (name: string) => ({ required: true, content: { 'application/json': { schema: ref(name) } } });
const optionalBody = (name: string) => ({ required: false, content: { 'application/json': { schema: ref(name) } } });
const pathParam = (name: string, description: string) => ({ name, in: 'path', required: true, schema: { type: 'string' }, description });
const consistency = {
  name: 'consistency', in: 'query', required: false, schema: { type: 'string', enum: ['linearizable', 'local'] },
  description: 'linearizable (default) reads what was committed before the request; local reads this replica without a round trip. The Consistency header says which.',
};
/** A route that asks for no credentials. */
const PUBLIC = { security: [] };
/** The page parameters of every list: `limit` and the cursor `after` (the previous page's `next`). */
const pageParams = [
  { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000 }, description: 'The most items in the page: 1 to 1000 (default 100).' },
  { name: 'after', in: 'query', required: false, schema: { type: 'string' }, description: 'The `next` of the previous page, an id of the items listed: this page continues after it. A value that could be no such id is refused (400).' },
];
const nextCursor = { type: ['string', 'null'], description: 'The cursor of the next page (pass it as `after`), or null when this is the last one.' };

export function agentDocument(): Json {
  return {
    openapi: '3.1.0',
    info: {
      title: 'agent-plane ledger: agent plane',
      version: '1.0.0',
      description: 'Submit intents and read what the attested party may see. Integers of 128-bit range (amounts, counters) are bare JSON numbers: decode them as big integers.',
      license: license(),
    },
    servers: servers(DEFAULT_SERVER_URLS.agent, 'A development node with the default configuration (npm start). A running node serves this document with its own address here.'),
    security: [{ attestation: [] }],
    paths: {
      '/api/v1/intents': {
        post: {
          operationId: 'submitIntent',
          summary: 'Submit an intent: judged at the commit point, posted or recorded as a refusal.',
          description: 'The attestation travels in the envelope\'s attestation field, as the specification has it, not in an Authorization header; '
            + 'so this route declares no security scheme, and a missing attestation is 401 unknown_agent like a missing header on a read. '
            + `Limits of one node: a body above limits.body_bytes_max (default ${LIMIT_DEFAULTS.body_bytes_max} bytes) is refused with 413 payload_too_large; `
            + `more entries than limits.entries_per_intent_max (default ${LIMIT_DEFAULTS.entries_per_intent_max}, at most ${LIMITS.entriesCountMax}) with 400 malformed_request; `
            + `at most ${LIMITS.evidenceCountMax} evidence digests. Both refusals record nothing. `
            + `One agent may send rate_limit.agent_intents_per_second intents a second (default ${RATE_DEFAULTS.agent_intents_per_second}, bursts of `
            + `${RATE_DEFAULTS.agent_burst}); beyond that 429 rate_limited with Retry-After, and nothing is recorded.`,
          ...PUBLIC,
          requestBody: body('IntentEnvelope'),
          responses: {
            200: {
              ...json('Outcome', 'The judgement: a posting, a recorded refusal, or the replay of an already committed transaction id. Branch on verdict and posted.'),
              headers: { 'Idempotent-Replayed': { description: 'true when the outcome is a replay.', schema: { type: 'string', enum: ['true'] } } },
            },
            // gateway.ts submitIntent, then the commit point (core intent.ts applyIntent) for what changed since.
            ...retryAfter(errors(BODY, ['invalid_agent_uri', 'unknown_agent', 'attestation', 'rate_limited', 'capability_mapping', 'stale_policy', 'no_active_policy',
              'policy_pin_mismatch', 'multi_currency_mandate_charge', 'substrate_rejected'], PROPOSAL)),
          },
        },
      },
      '/api/v1/transactions/{txn_id}': {
        get: {
          operationId: 'getTransaction', summary: 'A committed transaction of the attested party and its provenance.',
          parameters: [pathParam('txn_id', 'Transaction id (txn_...).'), consistency],
          responses: { 200: consistent(json('TransactionView', 'The transaction.')), ...errors(AGENT_READ, ['unknown_transaction']) },
        },
      },
      '/api/v1/accounts/{id}/balance': {
        get: {
          operationId: 'getAccountBalance', summary: 'Debit, credit and net totals per currency of an account of the attested party.',
          parameters: [pathParam('id', 'Account id (acc_...).'), consistency],
          responses: { 200: consistent(json('AccountBalance', 'The balance.')), ...errors(AGENT_READ, ['unknown_account']) },
        },
      },
      '/api/v1/obligations': {
        get: {
          operationId: 'listObligations', summary: 'Obligations of the attested party.',
          parameters: [{
            name: 'state', in: 'query', required: false, schema: { type: 'string', enum: ['owed', 'open', 'breached', 'discharged', 'all'] },
            description: 'owed (default): open obligations and breached repair duties, all in one page by deadline (limit and after are refused with it); the other states page through the party\'s obligations in id order.',
          }, ...pageParams, consistency],
          responses: { 200: consistent(json('ObligationList', 'A page of obligations.')), ...errors(AGENT_READ) },
        },
      },
      '/api/v1/policies/active': {
        get: {
          operationId: 'getActivePolicy', summary: 'The policy in force. Re-read it after a pin failure.',
          parameters: [consistency],
          responses: { 200: consistent(json('Policy', 'The active policy.')), ...errors(AGENT_READ, ['unknown_policy']) },
        },
      },
      '/api/v1/usages/{id}': {
        get: {
          operationId: 'getUsage', summary: 'A usage balance of the attested party.',
          parameters: [pathParam('id', 'Usage-balance id (usage_...).'), {
            name: 'format', in: 'query', required: false, schema: { type: 'string', enum: ['json', 'text'] },
            description: 'json (default), or text for the narration alone as text/plain.',
          }, consistency],
          responses: {
            200: consistent({
              description: 'The usage balance report, or its narration with format=text.',
              content: { 'application/json': { schema: ref('UsageReport') }, 'text/plain': { schema: { type: 'string' } } },
            }),
            ...errors(['invalid_usage_id'], AGENT_READ, ['unknown_usage']),
          },
        },
      },
      '/api/openapi.json': {
        get: { operationId: 'getOpenApi', summary: 'This document.', ...PUBLIC, responses: { 200: { description: 'The OpenAPI 3.1 document of the agent plane.', content: { 'application/json': { schema: { type: 'object', additionalProperties: true, description: 'An OpenAPI 3.1 document.' } } } }, ...errors() } },
      },
      '/healthz': { get: { operationId: 'health', summary: 'The process is up.', ...PUBLIC, responses: { 200: json('Health', 'Up.'), ...errors() } } },
      '/readyz': {
        get: {
          operationId: 'ready', summary: 'Member of a group with a known primary, log applied.', ...PUBLIC,
          responses: { 200: json('Readiness', 'Ready.'), ...errors(), 503: json('Readiness', 'Not ready: no primary known, the log not applied yet, or a reason given.') },
        },
      },
    },
    components: {
      securitySchemes: {
        attestation: {
          type: 'http', scheme: 'bearer', bearerFormat: 'PASETO v4.public',
          description: 'The agent\'s capability attestation, on every read as Authorization: Bearer <attestation>; the agent is its sub. '
            + 'No attestation, or an agent bound to no party: 401 unknown_agent; a rejected attestation: 403 attestation. '
            + 'POST /api/v1/intents carries the attestation in the envelope\'s attestation field instead.',
        },
      },
      schemas: requireAttestation(components(
        { IntentEnvelope: w.intentEnvelope(LIMITS.entriesCountMax) },
        {
          Outcome: w.Outcome, PendingObligation: w.PendingObligation, Provenance: w.Provenance, TransactionView: w.TransactionView,
          AccountBalance: w.AccountBalance, UsageReport: w.UsageReport, ObligationList: w.ObligationList, ObligationView: w.ObligationView,
          Policy: w.PolicyView, Health: w.HealthView, Readiness: w.ReadinessView, Error: w.ErrorBody,
        },
      )),
    },
  };
}

/**
 * The envelope's attestation is required, as the specification's envelope says; the
 * schema the node parses with leaves it optional only so that a missing one is answered
 * as a missing attestation (401 unknown_agent) rather than a malformed body (400).
 */
function requireAttestation(schemas: Json): Json {
  const envelope = schemas.IntentEnvelope as Json;
  const required = envelope.required as string[];
  if (!required.includes('attestation')) required.splice(required.indexOf('agent') + 1, 0, 'attestation');
  const attestation = (envelope.properties as Json).attestation as Json;
  attestation.description = 'The agent\'s capability attestation (PASETO v4.public). A missing or empty one is answered 401 unknown_agent.';
  return schemas;
}

export function adminDocument(): Json {
  const tag = (t: string) => ({ tags: [t] });
  const create = (id: string, summary: string, req: string, res: string, codes: ErrorCode[]) => ({
    post: { operationId: id, summary, ...tag(id), requestBody: body(req), responses: { 201: json(res, 'Created.'), ...errors(BODY, ADMIN_WRITE, ['already_exists'], codes) } },
  });
  const lifecycle = (step: string, type: AdminOperation['type']) => ({
    post: {
      operationId: `${step}Policy`, summary: `${step} a policy ${by(type)}; four eyes: the reviewer is not the author, the approver is neither.`,
      parameters: [pathParam('id', 'Policy id.')], requestBody: optionalBody('LifecycleRequest'),
      responses: { 200: json('Policy', 'The policy after the step.'), ...errors(BODY, ADMIN_WRITE, ['unknown_policy', 'invalid_transition']) },
    },
  });
  const list = (id: string, summary: string, item: string, key: string) => ({
    get: {
      operationId: id, summary, parameters: [...pageParams, consistency],
      responses: { 200: consistent({ description: `${summary} A page, in id order.`, content: { 'application/json': { schema: { type: 'object', properties: { [key]: { type: 'array', items: ref(item) }, next: nextCursor }, required: [key, 'next'] } } } }), ...errors(ADMIN_READ) },
    },
  });
  return {
    openapi: '3.1.0',
    info: {
      title: 'agent-plane ledger: administrative plane', version: '1.0.0', license: license(),
      description: 'Token-gated administration. Every mutation goes through the replicated log with the principal\'s name.',
    },
    servers: servers(DEFAULT_SERVER_URLS.admin, 'A development node with the default configuration (npm start). A running node serves this document with its own address here.'),
    security: [{ admin: [] }],
    paths: {
      '/admin/v1/trust-roots': {
        ...create('addTrustRoot', `Register an issuer of attestations and its Ed25519 key (PEM or PASERK k4.public) ${by('AddTrustRoot')}.`, 'TrustRootRequest', 'TrustRoot', []),
        ...list('listTrustRoots', 'The trust roots.', 'TrustRoot', 'trust_roots'),
      },
      '/admin/v1/trust-roots/{issuer}': {
        delete: { operationId: 'removeTrustRoot', summary: `Remove a trust root ${by('RemoveTrustRoot')}; its attestations are refused from then on.`, parameters: [pathParam('issuer', 'Issuer name.')], responses: { 200: json('TrustRoot', 'Removed.'), ...errors(ADMIN_WRITE, ['unknown_trust_root']) } },
      },
      '/admin/v1/parties': { ...create('addParty', `Create a party ${by('AddParty')}.`, 'PartyRequest', 'Party', []), ...list('listParties', 'The parties.', 'Party', 'parties') },
      '/admin/v1/agents': { ...create('bindAgent', `Bind an agent URI to a party ${by('BindAgent')}.`, 'BindingRequest', 'Binding', ['unknown_party']), ...list('listAgents', 'The agent bindings.', 'Binding', 'agents') },
      '/admin/v1/agents/{agent_uri}': {
        delete: { operationId: 'unbindAgent', summary: `Unbind an agent ${by('UnbindAgent')}; URL-encode the URI.`, parameters: [pathParam('agent_uri', 'Agent URI, URL-encoded.')], responses: { 200: json('Binding', 'Unbound.'), ...errors(ADMIN_WRITE, ['unknown_binding']) } },
      },
      '/admin/v1/accounts': create('openAccount', `Open an account, owned by a party or a house account ${by('OpenAccount')}.`, 'AccountRequest', 'AccountBalance', ['unknown_party']),
      '/admin/v1/accounts/{id}': { get: { operationId: 'getAccount', summary: 'An account (not party-scoped).', parameters: [pathParam('id', 'Account id.'), consistency], responses: { 200: consistent(json('AccountBalance', 'The account.')), ...errors(ADMIN_READ, ['unknown_account']) } } },
      '/admin/v1/usages': create('openUsage', `Open a usage balance in one currency, with an owner or none ${by('OpenUsage')}.`, 'UsageRequest', 'AdminUsageReport', ['unknown_party']),
      '/admin/v1/usages/{id}': { get: { operationId: 'getUsageAdmin', summary: 'A usage balance (not party-scoped).', parameters: [pathParam('id', 'Usage-balance id.'), consistency], responses: { 200: consistent(json('AdminUsageReport', 'The balance.')), ...errors(ADMIN_READ, ['unknown_usage']) } } },
      '/admin/v1/policies': {
        ...create('draftPolicy', `Draft a policy ${by('DraftPolicy')}. The bundle is checked now.`, 'PolicyRequest', 'Policy', ['invalid_policy']),
        get: { operationId: 'listPolicies', summary: 'The policies, a page at a time in id order, and the active one.', parameters: [...pageParams, consistency], responses: { 200: consistent({ description: 'A page of policies.', content: { 'application/json': { schema: { type: 'object', properties: { active: { type: ['string', 'null'] }, policies: { type: 'array', items: ref('Policy') }, next: nextCursor }, required: ['active', 'policies', 'next'] } } } }), ...errors(ADMIN_READ) } },
      },
      '/admin/v1/policies/{id}': { get: { operationId: 'getPolicy', summary: 'A policy and its history.', parameters: [pathParam('id', 'Policy id.'), consistency], responses: { 200: consistent(json('Policy', 'The policy.')), ...errors(ADMIN_READ, ['unknown_policy']) } } },
      '/admin/v1/policies/{id}/review': lifecycle('review', 'ReviewPolicy'),
      '/admin/v1/policies/{id}/approve': lifecycle('approve', 'ApprovePolicy'),
      '/admin/v1/policies/{id}/activate': lifecycle('activate', 'ActivatePolicy'),
      '/admin/v1/policies/{id}/dry-run': {
        post: { operationId: 'dryRunPolicy', summary: 'Judge recorded intents under this policy\'s rules, read-only: the most recent `limit` (at most 1000), then older pages with `before`.', parameters: [pathParam('id', 'Policy id.'), consistency], requestBody: optionalBody('DryRunRequest'), responses: { 200: consistent(json('DryRunReport', 'The verdicts that would change.')), ...errors(BODY, ADMIN_READ, ['unknown_policy', 'invalid_policy']) } },
      },
      '/admin/v1/cluster': { get: { operationId: 'getCluster', summary: 'Voters, learners, each member\'s role, addresses and lag, term, commit and applied index.', responses: { 200: json('Cluster', 'The group as this member sees it.'), ...errors(ADMIN) } } },
      '/admin/v1/cluster/transfer-leadership': {
        post: {
          operationId: 'transferLeadership',
          summary: 'Ask the primary to hand over to a member (operator).',
          description: 'Naming the member that already leads changes nothing and answers 200 with transferring_to null; on a standalone node (a group of one) that is the only member there is. Naming a member that is not in the group is 409 invalid_transition.',
          requestBody: body('TransferRequest'),
          responses: {
            200: json('Transfer', 'The member named already leads; nothing moves.'),
            202: json('Transfer', 'The transfer started; follow it on GET /admin/v1/cluster.'),
            // Not a proposal: Raft is asked directly (replica.ts transferLeadership).
            ...errors(BODY, ADMIN, ['forbidden', 'invalid_transition', 'not_primary']),
          },
        },
      },
      '/admin/v1/cluster/members': {
        post: {
          operationId: 'addMember',
          summary: 'Add a member as a learner (operator): it receives the log, by snapshot when it is far behind, but does not vote until promoted.',
          description: 'Start the new member first with cluster_state join (docs/operations.md). Answered once the change is applied on this replica. One change at a time: a change while another is uncommitted, or before a new primary committed an entry of its term, is 409 invalid_transition; retry.',
          requestBody: body('MemberRequest'),
          responses: { 201: json('MembershipChange', 'The learner was added; the cluster as this replica sees it after the change.'), ...errors(BODY, ADMIN_WRITE, ['already_exists', 'invalid_transition']) },
        },
      },
      '/admin/v1/cluster/members/{id}/promote': {
        post: {
          operationId: 'promoteMember',
          summary: 'Promote a learner to a voter (operator), once it has caught up.',
          description: 'A learner more than 1000 entries behind the commit index, or still receiving a snapshot, is 409 invalid_transition with its lag: a voter that cannot acknowledge would count toward the quorum.',
          parameters: [pathParam('id', 'The learner\'s node id.')],
          responses: { 200: json('MembershipChange', 'The learner votes now.'), ...errors(ADMIN_WRITE, ['not_found', 'invalid_transition']) },
        },
      },
      '/admin/v1/cluster/members/{id}': {
        delete: {
          operationId: 'removeMember',
          summary: 'Remove a member (operator), voter or learner; it stops serving and says so in /readyz.',
          description: 'Removing the primary hands leadership to the most up-to-date other voter first. The last voter is never removed (409 invalid_transition).',
          parameters: [pathParam('id', 'The member\'s node id.')],
          responses: { 200: json('MembershipChange', 'The member was removed.'), ...errors(ADMIN_WRITE, ['not_found', 'invalid_transition']) },
        },
      },
      '/admin/v1/log/digest': { get: { operationId: 'getDigest', summary: 'The hash-chain head (ledger digest), the applied index and the state hash.', parameters: [consistency], responses: { 200: consistent(json('Digest', 'The digest.')), ...errors(ADMIN_READ) } } },
      '/admin/v1/log/export': {
        get: {
          operationId: 'exportLog', summary: 'Every applied operation as NDJSON {index, op, result, entry_hash}, for audit and replay.',
          parameters: [consistency],
          responses: { 200: consistent({ description: "One canonical JSON record per line. A client that reads nothing for the node's http.write_stall_ms is cut: the body ends without its last chunk, never as a whole one.", content: { 'application/x-ndjson': { schema: { type: 'string' } } } }), ...errors(ADMIN_READ) },
        },
      },
      '/admin/v1/feed': {
        get: {
          operationId: 'followFeed',
          summary: 'The change feed: every operation that took effect, from a log index on, then live as entries are applied (feed or operator role).',
          description: 'NDJSON, one line each: a record exactly as the export writes it ({entry_hash, index, op, result}, canonical JSON), in log order; '
            + 'a heartbeat {"heartbeat":true,"applied":A,"next":N} whenever nothing was written for feed.heartbeat_interval_ms '
            + `(default ${DEFAULTS.feed.heartbeat_interval_ms}), where next is the index the stream continues from; and, when the node ends the stream, `
            + 'a last line {"error","message","resume_from"}: feed_lagging when the consumer left its buffer full for feed.lag_ms_max '
            + `(default ${DEFAULTS.feed.lag_ms_max}), shutting_down, or internal_error. Resume with from=resume_from, or with the last index processed plus one. `
            + 'Served by any replica from its own applied state; a from beyond the applied index waits, with heartbeats. '
            + `At most feed.consumers_max feeds at once (default ${DEFAULTS.feed.consumers_max}): one more answers 503 feed_unavailable. See docs/feed.md.`,
          parameters: [
            { name: 'from', in: 'query', required: false, schema: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER }, description: 'The first log index to carry (default 0): the last index processed plus one.' },
            { name: 'type', in: 'query', required: false, schema: { type: 'string' }, description: 'Only these operation types, comma-separated: SubmitIntent, Tick, an admin operation type, or the groups intent, tick, admin.' },
            { name: 'verdict', in: 'query', required: false, schema: { type: 'string' }, description: 'Only judged intents with these verdicts, comma-separated: Permitted, ForbiddenRejected, NotPermittedRejected, RepairOutstandingRejected, ObligationUnmetRejected.' },
          ],
          responses: {
            200: { description: 'The stream, one JSON value per line, until the consumer leaves or the node ends it.', content: { 'application/x-ndjson': { schema: { type: 'string' } } } },
            ...errors(ADMIN, ['malformed_request', 'feed_unavailable']),
          },
        },
      },
      '/admin/openapi.json': {
        get: { operationId: 'getOpenApiAdmin', summary: 'This document.', ...PUBLIC, responses: { 200: { description: 'The OpenAPI 3.1 document of the administrative plane.', content: { 'application/json': { schema: { type: 'object', additionalProperties: true, description: 'An OpenAPI 3.1 document.' } } } }, ...errors() } },
      },
      '/metrics': { get: { operationId: 'metrics', summary: 'Prometheus metrics.', ...PUBLIC, responses: { 200: { description: 'Metrics in the Prometheus text format (version 0.0.4).', content: { 'text/plain': { schema: { type: 'string' } } } }, ...errors() } } },
    },
    components: {
      securitySchemes: {
        admin: {
          type: 'http', scheme: 'bearer',
          description: 'An admin principal\'s token as Authorization: Bearer <token>; the node keeps only its SHA-256 and the principal\'s roles '
            + '(author, reviewer, approver, operator, feed). No token, or one of no principal: 401 unauthorized; a principal without the role a route needs, '
            + 'or one whose only role is feed on any route but GET /admin/v1/feed: 403 forbidden.',
        },
      },
      schemas: components(
        {
          TrustRootRequest: w.TrustRootRequest, PartyRequest: w.PartyRequest, BindingRequest: w.BindingRequest, AccountRequest: w.AccountRequest,
          UsageRequest: w.UsageRequest, PolicyRequest: w.PolicyRequest, LifecycleRequest: w.LifecycleRequest, DryRunRequest: w.DryRunRequest,
          TransferRequest: w.TransferRequest, MemberRequest: w.MemberRequest,
        },
        {
          TrustRoot: w.TrustRootView, Party: w.PartyView, Binding: w.BindingView, AccountBalance: w.AccountBalance,
          AdminUsageReport: w.AdminUsageReport, Policy: w.PolicyView, DryRunReport: w.DryRunReport, Cluster: w.ClusterView,
          Digest: w.DigestView, Transfer: w.TransferView, MembershipChange: w.MembershipChangeView, Error: w.ErrorBody,
        },
      ),
    },
  };
}

/** The documents as committed: pretty JSON with 128-bit bounds as bare numbers, newline-terminated. */
export function renderDocuments(): { agent: string; admin: string } {
  return { agent: `${stringifyJson(agentDocument(), 2)}\n`, admin: `${stringifyJson(adminDocument(), 2)}\n` };
}
