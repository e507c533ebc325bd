/**
 * The published contract: one OpenAPI 3.1 document per plane, generated from the
 * zod schemas the planes parse and answer with. The documents are committed
 * (packages/node/openapi/*.json) and served as committed; a test fails when the
 * generated ones differ, until `npm run openapi` regenerates them on purpose.
 */
import { z } from 'zod';
import { LIMITS, stringifyJson } from '@apl/core';
import { ConfigSchema } from './config.js';
import { STATUS, type ErrorCode } from './errors.js';
import * as w from './wire.js';

type Schemas = Record<string, z.ZodType>;
type Json = Record<string, unknown>;

/** The limits a node has unless its configuration says otherwise. */
const LIMIT_DEFAULTS = ConfigSchema.parse({}).limits;

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** Drops the input half of integer unions (`number | bigint`): on the wire both are one JSON integer. */
const override: NonNullable<Parameters<typeof z.toJSONSchema>[1]>['override'] = (ctx) => {
  const s = ctx.jsonSchema as Json;
  if (s.type === 'integer' && Array.isArray(s.anyOf)) delete s.anyOf;
};

function components(inputs: Schemas, outputs: Schemas): Json {
  const out: Json = {};
  for (const [io, set] of [['input', inputs], ['output', outputs]] as const) {
    const reg = z.registry<{ id: string }>();
    for (const [id, schema] of Object.entries(set)) reg.add(schema, { id });
    const doc = z.toJSONSchema(reg, { target: 'draft-2020-12', io, unrepresentable: 'any', uri: (id) => `#/components/schemas/${id}`, override });
    for (const [id, schema] of Object.entries(doc.schemas)) {
      const { $schema: _s, $id: _i, ...rest } = schema as Json;
      out[id] = rest;
    }
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

function errors(codes: ErrorCode[]): Json {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const c of codes) byStatus.set(STATUS[c], [...(byStatus.get(STATUS[c]) ?? []), c]);
  return Object.fromEntries([...byStatus].sort(([a], [b]) => a - b).map(([status, cs]) => [String(status), {
    description: cs.map((c) => `\`${c}\``).join(', '),
    content: { 'application/json': { schema: ref('Error') } },
  }]));
}

const json = (name: string, description: string) => ({ description, content: { 'application/json': { schema: ref(name) } } });
const body = (name: string) => ({ required: true, content: { 'application/json': { schema: ref(name) } } });
const optionalBody = (name: string) => ({ required: false, content: { 'application/json': { schema: ref(name) } } });
const pathParam = (name: string, description: string) => ({ name, in: 'path', required: true, schema: { type: 'string' }, description });
const consistency = {
  name: 'consistency', in: 'query', required: false, schema: { type: 'string', enum: ['linearizable', 'local'] },
  description: 'linearizable (default) reads what was committed before the request; local reads this replica without a round trip. The Consistency header says which.',
};
const READ_ERRORS: ErrorCode[] = ['malformed_request', 'unknown_agent', 'attestation', 'gateway_error', 'commit_unavailable'];
/** The page parameters of every list: `limit` and the cursor `after` (the previous page's `next`). */
const pageParams = [
  { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000 }, description: 'The most items in the page: 1 to 1000 (default 100).' },
  { name: 'after', in: 'query', required: false, schema: { type: 'string' }, description: 'The `next` of the previous page: this page continues after it.' },
];
const nextCursor = { type: ['string', 'null'], description: 'The cursor of the next page (pass it as `after`), or null when this is the last one.' };

export function agentDocument(): Json {
  const bearer = [{ attestation: [] }];
  return {
    openapi: '3.1.0',
    info: {
      title: 'agent-plane ledger: agent plane',
      version: '1.0.0',
      description: 'Submit intents and read what the attested party may see. Integers of 128-bit range (amounts, counters) are bare JSON numbers: decode them as big integers.',
    },
    paths: {
      '/api/v1/intents': {
        post: {
          operationId: 'submitIntent',
          summary: 'Submit an intent: judged at the commit point, posted or recorded as a refusal.',
          description: `Limits of one node: a body above limits.body_bytes_max (default ${LIMIT_DEFAULTS.body_bytes_max} bytes) is refused with 413 payload_too_large; `
            + `more entries than limits.entries_per_intent_max (default ${LIMIT_DEFAULTS.entries_per_intent_max}, at most ${LIMITS.entriesCountMax}) with 400 malformed_request; `
            + `at most ${LIMITS.evidenceCountMax} evidence digests. Both refusals record nothing.`,
          requestBody: body('IntentEnvelope'),
          responses: {
            200: {
              ...json('Outcome', 'The judgement: a posting, a recorded refusal, or the replay of an already committed transaction id. Branch on verdict and posted.'),
              headers: { 'Idempotent-Replayed': { description: 'true when the outcome is a replay.', schema: { type: 'string', enum: ['true'] } } },
            },
            ...errors(['malformed_request', 'unknown_agent', 'attestation', 'stale_policy', 'policy_pin_mismatch', 'no_active_policy',
              'payload_too_large', 'not_primary', 'invalid_agent_uri', 'capability_mapping',
              'multi_currency_mandate_charge', 'substrate_rejected', 'gateway_error', 'commit_unavailable']),
          },
        },
      },
      '/api/v1/transactions/{txn_id}': {
        get: {
          operationId: 'getTransaction', summary: 'A committed transaction of the attested party and its provenance.', security: bearer,
          parameters: [pathParam('txn_id', 'Transaction id (txn_...).'), consistency],
          responses: { 200: json('TransactionView', 'The transaction.'), ...errors([...READ_ERRORS, 'unknown_transaction']) },
        },
      },
      '/api/v1/accounts/{id}/balance': {
        get: {
          operationId: 'getAccountBalance', summary: 'Debit, credit and net totals per currency of an account of the attested party.', security: bearer,
          parameters: [pathParam('id', 'Account id (acc_...).'), consistency],
          responses: { 200: json('AccountBalance', 'The balance.'), ...errors([...READ_ERRORS, 'unknown_account']) },
        },
      },
      '/api/v1/obligations': {
        get: {
          operationId: 'listObligations', summary: 'Obligations of the attested party.', security: bearer,
          parameters: [{
            name: 'state', in: 'query', required: false, schema: { type: 'string', enum: ['owed', 'open', 'breached', 'discharged', 'all'] },
            description: 'owed (default): open obligations and breached repair duties, all in one page by deadline; the other states page through the party\'s obligations in id order.',
          }, ...pageParams, consistency],
          responses: { 200: json('ObligationList', 'A page of obligations.'), ...errors(READ_ERRORS) },
        },
      },
      '/api/v1/policies/active': {
        get: {
          operationId: 'getActivePolicy', summary: 'The policy in force. Re-read it after a pin failure.', security: bearer,
          parameters: [consistency],
          responses: { 200: json('Policy', 'The active policy.'), ...errors([...READ_ERRORS, 'unknown_policy']) },
        },
      },
      '/api/v1/usages/{id}': {
        get: {
          operationId: 'getUsage', summary: 'A usage balance of the attested party.', security: bearer,
          parameters: [pathParam('id', 'Usage-balance id (usage_...).'), {
            name: 'format', in: 'query', required: false, schema: { type: 'string', enum: ['json', 'text'] },
            description: 'json (default), or text for the narration alone as text/plain.',
          }, consistency],
          responses: {
            200: {
              description: 'The usage balance report, or its narration with format=text.',
              content: { 'application/json': { schema: ref('UsageReport') }, 'text/plain': { schema: { type: 'string' } } },
            },
            ...errors([...READ_ERRORS, 'invalid_usage_id', 'unknown_usage']),
          },
        },
      },
      '/api/openapi.json': { get: { operationId: 'getOpenApi', summary: 'This document.', responses: { 200: { description: 'The OpenAPI 3.1 document of the agent plane.' } } } },
      '/healthz': { get: { operationId: 'health', summary: 'The process is up.', responses: { 200: { description: 'Up.' } } } },
      '/readyz': { get: { operationId: 'ready', summary: 'Member of a group with a known primary, log applied.', responses: { 200: { description: 'Ready.' }, 503: { description: 'Not ready.' } } } },
    },
    components: {
      securitySchemes: { attestation: { type: 'http', scheme: 'bearer', bearerFormat: 'PASETO v4.public', description: 'The agent\'s capability attestation; its sub is the agent.' } },
      schemas: components(
        { IntentEnvelope: w.intentEnvelope(LIMITS.entriesCountMax) },
        {
          Outcome: w.Outcome, PendingObligation: w.PendingObligation, Provenance: w.Provenance, TransactionView: w.TransactionView,
          AccountBalance: w.AccountBalance, UsageReport: w.UsageReport, ObligationList: w.ObligationList, ObligationView: w.ObligationView,
          Policy: w.PolicyView, Error: w.ErrorBody,
        },
      ),
    },
  };
}

export function adminDocument(): Json {
  const tag = (t: string) => ({ tags: [t] });
  const create = (id: string, summary: string, req: string, res: string, codes: ErrorCode[]) => ({
    post: { operationId: id, summary, ...tag(id), requestBody: body(req), responses: { 201: json(res, 'Created.'), ...errors(['malformed_request', 'unauthorized', 'forbidden', 'already_exists', ...codes, 'payload_too_large', 'commit_unavailable', 'gateway_error', 'not_primary']) } },
  });
  const lifecycle = (step: string) => ({
    post: {
      operationId: `${step}Policy`, summary: `${step} a policy (four eyes: the reviewer is not the author; the approver is neither).`,
      parameters: [pathParam('id', 'Policy id.')], requestBody: optionalBody('LifecycleRequest'),
      responses: { 200: json('Policy', 'The policy after the step.'), ...errors(['malformed_request', 'unauthorized', 'forbidden', 'unknown_policy', 'invalid_transition', 'payload_too_large', 'commit_unavailable', 'gateway_error', 'not_primary']) },
    },
  });
  const list = (id: string, summary: string, item: string, key: string) => ({
    get: {
      operationId: id, summary, parameters: pageParams,
      responses: { 200: { description: `${summary} A page, in id order.`, content: { 'application/json': { schema: { type: 'object', properties: { [key]: { type: 'array', items: ref(item) }, next: nextCursor }, required: [key, 'next'] } } } }, ...errors(['malformed_request', 'unauthorized']) },
    },
  });
  return {
    openapi: '3.1.0',
    info: { title: 'agent-plane ledger: administrative plane', version: '1.0.0', description: 'Token-gated administration. Every mutation goes through the replicated log with the principal\'s name.' },
    security: [{ admin: [] }],
    paths: {
      '/admin/v1/trust-roots': {
        ...create('addTrustRoot', 'Register an issuer of attestations and its Ed25519 key (PEM or PASERK k4.public).', 'TrustRootRequest', 'TrustRoot', []),
        ...list('listTrustRoots', 'The trust roots.', 'TrustRoot', 'trust_roots'),
      },
      '/admin/v1/trust-roots/{issuer}': {
        delete: { operationId: 'removeTrustRoot', summary: 'Remove a trust root; its attestations are refused from then on.', parameters: [pathParam('issuer', 'Issuer name.')], responses: { 200: json('TrustRoot', 'Removed.'), ...errors(['malformed_request', 'unauthorized', 'forbidden', 'unknown_trust_root', 'commit_unavailable', 'gateway_error', 'not_primary']) } },
      },
      '/admin/v1/parties': { ...create('addParty', 'Create a party.', 'PartyRequest', 'Party', []), ...list('listParties', 'The parties.', 'Party', 'parties') },
      '/admin/v1/agents': { ...create('bindAgent', 'Bind an agent URI to a party.', 'BindingRequest', 'Binding', ['unknown_party']), ...list('listAgents', 'The agent bindings.', 'Binding', 'agents') },
      '/admin/v1/agents/{agent_uri}': {
        delete: { operationId: 'unbindAgent', summary: 'Unbind an agent (URL-encode the URI).', parameters: [pathParam('agent_uri', 'Agent URI, URL-encoded.')], responses: { 200: json('Binding', 'Unbound.'), ...errors(['malformed_request', 'unauthorized', 'forbidden', 'unknown_binding', 'commit_unavailable', 'gateway_error', 'not_primary']) } },
      },
      '/admin/v1/accounts': create('openAccount', 'Open an account, owned by a party or a house account.', 'AccountRequest', 'AccountBalance', ['unknown_party']),
      '/admin/v1/accounts/{id}': { get: { operationId: 'getAccount', summary: 'An account (not party-scoped).', parameters: [pathParam('id', 'Account id.')], responses: { 200: json('AccountBalance', 'The account.'), ...errors(['malformed_request', 'unauthorized', 'unknown_account']) } } },
      '/admin/v1/usages': create('openUsage', 'Open a usage balance in one currency, with an owner or none.', 'UsageRequest', 'AdminUsageReport', ['unknown_party']),
      '/admin/v1/usages/{id}': { get: { operationId: 'getUsageAdmin', summary: 'A usage balance (not party-scoped).', parameters: [pathParam('id', 'Usage-balance id.')], responses: { 200: json('AdminUsageReport', 'The balance.'), ...errors(['malformed_request', 'unauthorized', 'unknown_usage']) } } },
      '/admin/v1/policies': {
        ...create('draftPolicy', 'Draft a policy (author). The bundle is checked now.', 'PolicyRequest', 'Policy', ['invalid_policy']),
        get: { operationId: 'listPolicies', summary: 'The policies, a page at a time in id order, and the active one.', parameters: pageParams, responses: { 200: { description: 'A page of policies.', content: { 'application/json': { schema: { type: 'object', properties: { active: { type: ['string', 'null'] }, policies: { type: 'array', items: ref('Policy') }, next: nextCursor }, required: ['active', 'policies', 'next'] } } } }, ...errors(['malformed_request', 'unauthorized']) } },
      },
      '/admin/v1/policies/{id}': { get: { operationId: 'getPolicy', summary: 'A policy and its history.', parameters: [pathParam('id', 'Policy id.')], responses: { 200: json('Policy', 'The policy.'), ...errors(['malformed_request', 'unauthorized', 'unknown_policy']) } } },
      '/admin/v1/policies/{id}/review': lifecycle('review'),
      '/admin/v1/policies/{id}/approve': lifecycle('approve'),
      '/admin/v1/policies/{id}/activate': lifecycle('activate'),
      '/admin/v1/policies/{id}/dry-run': {
        post: { operationId: 'dryRunPolicy', summary: 'Judge recorded intents under this policy\'s rules, read-only: the most recent `limit` (at most 1000), then older pages with `before`.', parameters: [pathParam('id', 'Policy id.')], requestBody: optionalBody('DryRunRequest'), responses: { 200: json('DryRunReport', 'The verdicts that would change.'), ...errors(['malformed_request', 'unauthorized', 'unknown_policy', 'invalid_policy', 'payload_too_large']) } },
      },
      '/admin/v1/cluster': { get: { operationId: 'getCluster', summary: 'Members, roles, term, commit and applied index.', responses: { 200: json('Cluster', 'The group as this member sees it.'), ...errors(['unauthorized']) } } },
      '/admin/v1/cluster/transfer-leadership': {
        post: {
          operationId: 'transferLeadership',
          summary: 'Ask the primary to hand over to a member (operator).',
          description: 'Naming the member that already leads changes nothing and answers 200 with transferring_to null; on a standalone node (a group of one) that is the only member there is. Naming a member that is not in the group is 409 invalid_transition.',
          requestBody: body('TransferRequest'),
          responses: {
            200: json('Transfer', 'The member named already leads; nothing moves.'),
            202: json('Transfer', 'The transfer started; follow it on GET /admin/v1/cluster.'),
            ...errors(['malformed_request', 'unauthorized', 'forbidden', 'invalid_transition', 'payload_too_large', 'not_primary']),
          },
        },
      },
      '/admin/v1/log/digest': { get: { operationId: 'getDigest', summary: 'The hash-chain head (ledger digest), the applied index and the state hash.', responses: { 200: json('Digest', 'The digest.'), ...errors(['unauthorized']) } } },
      '/admin/v1/log/export': {
        get: {
          operationId: 'exportLog', summary: 'Every applied operation as NDJSON {index, op, result, entry_hash}, for audit and replay.',
          responses: { 200: { description: 'One canonical JSON record per line.', content: { 'application/x-ndjson': { schema: { type: 'string' } } } }, ...errors(['unauthorized']) },
        },
      },
      '/metrics': { get: { operationId: 'metrics', summary: 'Prometheus metrics.', security: [], responses: { 200: { description: 'Metrics in the Prometheus text format.' } } } },
    },
    components: {
      securitySchemes: { admin: { type: 'http', scheme: 'bearer', description: 'An admin principal\'s token.' } },
      schemas: components(
        {
          TrustRootRequest: w.TrustRootRequest, PartyRequest: w.PartyRequest, BindingRequest: w.BindingRequest, AccountRequest: w.AccountRequest,
          UsageRequest: w.UsageRequest, PolicyRequest: w.PolicyRequest, LifecycleRequest: w.LifecycleRequest, DryRunRequest: w.DryRunRequest,
          TransferRequest: w.TransferRequest,
        },
        {
          TrustRoot: w.TrustRootView, Party: w.PartyView, Binding: w.BindingView, AccountBalance: w.AccountBalance,
          AdminUsageReport: w.AdminUsageReport, Policy: w.PolicyView, DryRunReport: w.DryRunReport, Cluster: w.ClusterView,
          Digest: w.DigestView, Transfer: w.TransferView, Error: w.ErrorBody,
        },
      ),
    },
  };
}

/** The documents as committed: pretty JSON with 128-bit bounds as bare numbers, newline-terminated. */
export function renderDocuments(): { agent: string; admin: string } {
  return { agent: `${stringifyJson(agentDocument(), 2)}\n`, admin: `${stringifyJson(adminDocument(), 2)}\n` };
}
