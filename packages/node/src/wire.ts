/**
 * The wire: request schemas (parsed from `unknown`) and response schemas (the
 * contract the OpenAPI documents publish). Field schemas come from the core, so a
 * leg or a usage move is defined once. Response objects are strict: a field the
 * contract does not name fails the contract tests.
 */
import { z } from 'zod';
import {
  AccountId, AgentUri, Comment, Currency, Entry, IntentAction, Issuer, LIMITS, PartyId, PolicyId, Sha256Hex, LONE_SURROGATE, issuePath,
  TransactionId, UsageId, UsageMove,
} from '@apl/core';
import { STATUS } from './errors.js';
import { MEMBER_ID, MEMBER_ID_PHRASE, MemberAddresses } from './membership.js';

const UNICODE_PHRASE = 'must be Unicode text, which a lone surrogate (an escape such as \\ud800 without its pair) is not';

/** The intent envelope of POST /api/v1/intents. `agent` is checked apart (422 invalid_agent_uri). */
export function intentEnvelope(entriesMax: number) {
  return z.strictObject({
    agent: z.string().max(512),
    // Its length is the attestation's check (403, as on a read), within the body's limit.
    attestation: z.string().optional(),
    transaction: TransactionId,
    entries: z.array(Entry).max(Math.min(entriesMax, LIMITS.entriesCountMax), `at most ${entriesMax} entries per intent`),
    consume_usage: UsageMove.optional(),
    meter_usage: UsageMove.optional(),
    bill_usage: UsageMove.optional(),
    // As the justification: text the chain holds is Unicode (RFC 8785 takes I-JSON).
    action: IntentAction.superRefine((a, ctx) => {
      for (const [name, v] of Object.entries(a.bindings)) {
        if (typeof v === 'string' && LONE_SURROGATE.test(v)) ctx.addIssue({ code: 'custom', path: ['bindings', name], message: UNICODE_PHRASE });
      }
    }),
    evidence: z.array(Sha256Hex).max(LIMITS.evidenceCountMax, `at most ${LIMITS.evidenceCountMax} evidence digests per intent`),
    justification: z.string().max(4096).refine((s) => !LONE_SURROGATE.test(s), 'must be Unicode text: a lone surrogate (an escape such as \\ud800 without its pair) has no UTF-8 form to hash'),
    policy: PolicyId,
  });
}
export type IntentEnvelope = z.output<ReturnType<typeof intentEnvelope>>;

/** The query of a read: linearizable (the default) or this replica's state as it is (`local`). */
export const ReadQuery = z.strictObject({ consistency: z.enum(['linearizable', 'local'], { error: 'must be linearizable or local' }).optional() });

/** An obligation id as the ledger makes them: `obl_<transaction>_<rule's obligation>`, a repair duty's with `/<duty>` after it. */
export const ObligationCursor = z.string().regex(/^obl_[A-Za-z0-9_.:/-]{1,508}$/);

/**
 * The query of a list read: at most `limit` items (1 to 1000, default 100), after the
 * cursor `after`, the `next` of the previous page, which is an id of the items listed
 * (`cursor`). A cursor that could not be one is refused rather than read as a
 * position, which would answer an unrelated page.
 */
export function pageQuery(cursor: z.ZodType<string>, what: string) {
  return z.strictObject({
    limit: z.string().regex(/^[1-9][0-9]{0,3}$/, 'must be an integer from 1 to 1000').transform(Number)
      .refine((n) => n <= 1000, 'must be an integer from 1 to 1000').optional()
      .meta({ description: 'The most items in the page: 1 to 1000 (default 100).' }),
    after: z.string().max(512).refine((v) => cursor.safeParse(v).success, `must be the next of a previous page (${what})`).optional()
      .meta({ description: 'The `next` of the previous page: the page continues after it.' }),
    ...ReadQuery.shape,
  });
}

// Responses. Integers of 128-bit range are bigint here and bare numbers on the wire.
const int128 = z.bigint().meta({ type: 'integer', format: 'int128' });
const tick = z.number().int().min(0);
/** A Raft log index or term, or a count: never negative. */
const logIndex = z.number().int().min(0);
const Verdict = z.enum(['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected']);
const ObligationState = z.enum(['open', 'discharged', 'breached']);
const PolicyRef = z.strictObject({ id: z.string(), bundle_hash: Sha256Hex });

export const PendingObligation = z.strictObject({
  id: z.string(), rule: z.string(), action: z.string(), deadline_tick: tick, state: ObligationState, repair_of: z.string().optional(),
}).meta({ description: 'An obligation the acting party owes.' });

export const Provenance = z.strictObject({
  tick,
  log_index: z.number().int().min(1),
  entry_hash: Sha256Hex,
  authority: z.strictObject({ issuer: z.string(), token_id: z.string(), capability: z.string() }),
  prohibitions_checked: z.array(z.string()),
  winning_rule: z.string(),
  basis: z.string().optional().meta({ description: 'Why an intent was refused, with the real figures.' }),
  obligations_discharged: z.array(z.string()),
  obligations_created: z.array(z.string()),
  policy: PolicyRef,
});

const outcomeShape = {
  transaction: TransactionId,
  verdict: Verdict,
  posted: z.boolean(),
  policy: z.string(),
  obligations_pending: z.array(PendingObligation),
  justification_hash: Sha256Hex,
  provenance: Provenance,
};
export const Outcome = z.strictObject(outcomeShape).meta({ description: 'The judgement of an intent: a posting, a recorded refusal, or the replay of one.' });

const WireAmount = z.strictObject({ minor: int128, currency: z.string() });
const WireEntry = z.strictObject({ account: z.string(), side: z.enum(['Debit', 'Credit']), amount: WireAmount });
const WireMove = z.strictObject({ usage: z.string(), amount: WireAmount });
const WireBindings = z.record(z.string(), z.union([z.string(), z.boolean(), int128]));

export const TransactionView = z.strictObject({
  ...outcomeShape,
  agent: z.string(),
  party: z.string(),
  action: z.strictObject({ action: z.string(), bindings: WireBindings }),
  entries: z.array(WireEntry),
  consume_usage: WireMove.optional(),
  meter_usage: WireMove.optional(),
  bill_usage: WireMove.optional(),
  evidence: z.array(Sha256Hex),
});

export const AccountBalance = z.strictObject({
  account: z.string(),
  party: z.string().nullable(),
  balances: z.array(z.strictObject({ currency: z.string(), debits: int128, credits: int128, net: int128 })),
});

const usageShape = {
  usage: z.string(), currency: z.string(), consumed: int128, metered: int128, billed: int128,
  unmetered: int128, unbilled: int128, reconciled: z.boolean(), text: z.string(),
};
export const UsageReport = z.strictObject(usageShape);
export const AdminUsageReport = z.strictObject({ ...usageShape, owner: z.string().nullable() });

export const ObligationView = z.strictObject({
  id: z.string(), rule: z.string(), action: z.string(), transaction: z.string(), created_tick: tick, deadline_tick: tick,
  state: ObligationState, repair_of: z.string().nullable(), blocks: z.array(z.string()),
  discharged_by: z.string().nullable(), discharged_at_tick: tick.nullable(), breached_at_tick: tick.nullable(), policy: PolicyRef,
});
const next = z.string().nullable().meta({ description: 'The cursor of the next page (pass it as `after`), or null when this is the last one.' });
export const ObligationList = z.strictObject({ party: z.string(), tick, obligations: z.array(ObligationView), next });

const PolicyEvent = z.strictObject({
  action: z.enum(['draft', 'review', 'approve', 'activate', 'supersede']), by: z.string(), tick, log_index: z.number().int().min(1), comment: z.string().optional(),
});
export const PolicyView = z.strictObject({
  id: z.string(),
  state: z.enum(['draft', 'reviewed', 'approved', 'active', 'superseded']),
  bundle_hash: Sha256Hex,
  author: z.string(),
  reviewer: z.string().nullable(),
  approver: z.string().nullable(),
  activated_at_tick: tick.nullable(),
  superseded_at_tick: tick.nullable(),
  history: z.array(PolicyEvent),
  bundle: z.unknown().meta({ description: 'The rule bundle as authored (see docs/policy-language.md).' }),
});

const ERROR_CODES = Object.keys(STATUS) as [string, ...string[]];
export const ErrorBody = z.looseObject({
  error: z.enum(ERROR_CODES),
  message: z.string(),
}).meta({ description: 'Every error: a code, a plain English message, and the extra fields of its code.' });

// Admin requests.
export const TrustRootRequest = z.strictObject({ issuer: Issuer, public_key: z.string().min(1).max(4096) });
export const TrustRootView = z.strictObject({ issuer: z.string(), key_id: z.string(), public_key: z.string().optional() });
export const PartyRequest = z.strictObject({ id: PartyId });
export const PartyView = z.strictObject({ id: z.string() });
/**
 * A binding names its agent's host in lower case: a host is the same host in any case
 * (RFC 3986), so agent://ACME.example/agent/x and agent://acme.example/agent/x would be
 * one agent bound twice, perhaps to two parties. Bindings recorded before stay as they are.
 */
const BoundAgentUri = AgentUri.refine((uri) => {
  const host = uri.slice('agent://'.length, uri.indexOf('/', 'agent://'.length));
  return host === host.toLowerCase();
}, 'must write its host in lower case (a host is the same in any case, so two spellings would name one agent)');
export const BindingRequest = z.strictObject({ agent: BoundAgentUri, party: PartyId });
export const BindingView = z.strictObject({ agent: z.string(), party: z.string().nullable() });
// A null party or owner is taken as none, as the reads of what these create print it.
export const AccountRequest = z.strictObject({ id: AccountId, party: PartyId.nullable().optional() });
export const UsageRequest = z.strictObject({ id: UsageId, currency: Currency, owner: PartyId.nullable().optional() });
export const PolicyRequest = z.strictObject({ id: PolicyId, bundle: z.unknown().meta({ description: 'A rule bundle (see docs/policy-language.md).' }) });
export const LifecycleRequest = z.strictObject({ comment: Comment.refine((s) => !LONE_SURROGATE.test(s), UNICODE_PHRASE).optional() });

/**
 * Where a policy bundle holds a string (a value or a key) with a lone surrogate: its
 * hash is of its RFC 8785 form, which only Unicode text has. Checked before a draft is
 * proposed, not at the commit point, so that a log recorded before replays the same.
 */
export function loneSurrogates(value: unknown, path: string[] = []): { path: string; message: string }[] {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? [{ path: issuePath(path), message: UNICODE_PHRASE }] : [];
  if (typeof value !== 'object' || value === null) return [];
  const found: { path: string; message: string }[] = [];
  for (const [k, v] of Object.entries(value)) {
    if (LONE_SURROGATE.test(k)) found.push({ path: issuePath([...path, k]), message: `its name ${UNICODE_PHRASE}` });
    found.push(...loneSurrogates(v, [...path, k]));
  }
  return found;
}
const LIMIT_PHRASE = 'must be an integer from 1 to 1000';
const BEFORE_PHRASE = 'must be a log index (the next_before of a previous report)';
export const DryRunRequest = z.strictObject({
  limit: z.number({ error: LIMIT_PHRASE }).int(LIMIT_PHRASE).min(1, LIMIT_PHRASE).max(1000, LIMIT_PHRASE).optional()
    .meta({ description: 'How many recorded intents to judge, the most recent first (1 to 1000, default 100).' }),
  before: z.number({ error: BEFORE_PHRASE }).int(BEFORE_PHRASE).min(1, BEFORE_PHRASE).max(Number.MAX_SAFE_INTEGER, BEFORE_PHRASE).optional()
    .meta({ description: 'Judge intents recorded before this log index: the next_before of the previous report, to page back through history.' }),
});
export const DryRunReport = z.strictObject({
  policy: z.string(),
  bundle_hash: Sha256Hex,
  evaluated: logIndex,
  unchanged: logIndex,
  decided_by_obligations: logIndex,
  changed: z.array(z.strictObject({ transaction: z.string(), party: z.string(), recorded: Verdict, would_be: Verdict, winning_rule: z.string(), basis: z.string().optional() })),
  refused: z.array(z.strictObject({ transaction: z.string(), party: z.string(), recorded: Verdict, error: z.literal('multi_currency_mandate_charge'), message: z.string() }))
    .meta({ description: 'Recorded intents this policy would refuse before judging them (422, nothing recorded): legs in several currencies, of an action a rule marks single_currency. Counted in evaluated.' }),
  next_before: z.number().int().min(1).nullable().meta({ description: 'Pass it as `before` to judge the intents recorded earlier; null when none are left.' }),
});
export const TransferRequest = z.strictObject({ to: z.string({ error: (iss) => (iss.input === undefined ? 'is required' : 'must be a member id') }).min(1, 'must be a member id').max(32, 'must be a member id') });
export const TransferView = z.strictObject({
  leader: z.string().nullable().meta({ description: 'The member that leads as the request is answered.' }),
  transferring_to: z.string().nullable().meta({ description: 'The member leadership is being handed to; null when it already leads.' }),
});
const MemberId = z.string({ error: MEMBER_ID_PHRASE }).regex(MEMBER_ID, MEMBER_ID_PHRASE);
export const MemberRequest = z.strictObject({
  id: MemberId.meta({ description: 'The new member\'s node id; its peer certificate must name it (CN and DNS SAN).' }),
  ...MemberAddresses.shape,
});
export const MemberParam = z.strictObject({ id: MemberId });
/** A member's role as the status routes say it: Raft's, or learner (no vote yet), or removed. */
const MemberRoleView = z.enum(['leader', 'follower', 'preCandidate', 'candidate', 'learner', 'removed'])
  .meta({ description: 'This replica\'s role: Raft\'s own (leader, follower, preCandidate, candidate), or learner (it receives the log but does not vote), or removed (it applied its removal and serves nothing).' });
export const ClusterView = z.strictObject({
  node: z.string(),
  role: MemberRoleView,
  term: logIndex,
  leader: z.string().nullable(),
  commit_index: logIndex,
  applied_index: logIndex,
  voters: z.array(z.string()).meta({ description: 'The voting members in force: the latest configuration in this replica\'s log.' }),
  learners: z.array(z.string()).meta({ description: 'Members that receive the log but do not vote, until promoted.' }),
  removed: z.array(z.string()).meta({ description: 'The ids removed from the group so far: a member is never added again under one of them.' }),
  members: z.array(z.strictObject({
    id: z.string(), agent_url: z.string().nullable(), admin_url: z.string().nullable(), peer_addr: z.string().nullable(),
    role: z.enum(['leader', 'follower', 'learner']),
    voter: z.boolean(),
    match_index: logIndex.nullable().meta({ description: 'The highest log index the primary knows the member holds; null unless this replica is the primary.' }),
    lag: logIndex.nullable().meta({ description: 'Entries the member is behind the commit index (commit_index - match_index, at least 0); null unless this replica is the primary.' }),
    reachable: z.boolean().nullable().meta({ description: 'Whether the member answered the primary within the last election timeout (the primary itself: true); null unless this replica is the primary.' }),
  })),
});
export const MembershipChangeView = ClusterView.extend({
  change: z.enum(['addLearner', 'promote', 'remove']),
  id: z.string().meta({ description: 'The member the change names.' }),
  index: logIndex.meta({ description: 'The log index of the change, applied on this replica before the answer.' }),
});
/** GET /healthz: the process is up and its event loop answers. */
export const HealthView = z.strictObject({ status: z.literal('ok') });
/** GET /readyz: whether this replica serves, and what it knows of its group. */
export const ReadinessView = z.strictObject({
  status: z.enum(['ready', 'not ready']),
  node: z.string(),
  role: MemberRoleView,
  leader: z.string().nullable().meta({ description: 'The primary this replica knows of; null during an election.' }),
  commit_index: logIndex,
  applied_index: logIndex,
  reason: z.string().optional().meta({ description: 'Why it does not serve when waiting will not change it: not added to the group yet, removed from it, or its replica stopped.' }),
});
export const DigestView = z.strictObject({ applied_index: logIndex, tick, digest: Sha256Hex, state_hash: Sha256Hex });
