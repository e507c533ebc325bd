/**
 * The commit point of an intent. Both laws are judged here, in one step, in this
 * order (DESIGN §4):
 *   1. the agent is bound to a party, and a transaction id already recorded for that
 *      party replays its recorded outcome (ids are scoped per party, as Stripe scopes
 *      idempotency keys per account: another party's use of an id is not seen);
 *   2. the attestation's issuer is still trusted with the same key, and a capability
 *      grants the action;
 *   3. the pinned policy is the one in force;
 *   4. the substrate laws hold (mandate charges in one currency, conservation,
 *      accounts, usage chain; and, for a posting that creates obligations, the
 *      party owes no more than LIMITS.obligationsOwedMax at once);
 *   5. the normative law gives the verdict; a refusal is recorded, a permission posts.
 * Steps 1 to 4 record nothing when they refuse. Every check runs before any mutation.
 */
import { assert, fail, ok, substrate, type LedgerError, type Result } from './errors.js';
import { commitPostings, legTotals, planPostings } from './journal.js';
import { createObligations, discharge, owedFootprint, pendingFor } from './obligations.js';
import type { SubmitIntent } from './ops.js';
import { grantingCapability, matchesPattern } from './patterns.js';
import type { Facts } from './policy/conditions.js';
import { judge } from './policy/evaluate.js';
import { LIMITS } from './schema.js';
import { scoped, type Outcome, type Policy, type State, type TransactionRecord } from './state.js';
import { commitUsage, planUsage } from './usage.js';

export type IntentResult = { kind: 'recorded'; outcome: Outcome } | { kind: 'replayed'; transaction: string };

export function applyIntent(state: State, op: SubmitIntent, logIndex: number): Result<IntentResult> {
  const party = state.agents.get(op.agent);
  if (party === undefined) return fail('unknown_agent', `The agent ${op.agent} is not bound to a party.`);
  if (state.transactions.has(scoped(party, op.transaction))) return ok({ kind: 'replayed', transaction: op.transaction });
  const root = state.trustRoots.get(op.authority.issuer);
  if (!root || root.key_id !== op.authority.key_id) {
    return fail('attestation', `The attestation's issuer ${op.authority.issuer} is not a trust root with this key.`);
  }
  const capability = grantingCapability(op.authority.capabilities, op.action.action);
  if (capability === null) {
    return fail('capability_mapping', `The attestation grants no capability for action ${op.action.action}.`);
  }

  const pin = checkPin(state, op.policy);
  if (!pin.ok) return pin;
  const policy = pin.value;

  const single = singleCurrencyRefusal(policy, op.action.action, op.entries);
  if (single !== null) return fail('multi_currency_mandate_charge', single);
  const postings = planPostings(state, party, op.entries);
  if (!postings.ok) return substrate(postings.message);
  const usage = planUsage(state, party, op);
  if (!usage.ok) return substrate(usage.message);

  const facts: Facts = {
    party,
    agent: op.agent,
    action: op.action.action,
    bindings: op.action.bindings,
    entries: op.entries,
    moves: op,
    evidence: op.evidence,
    tick: state.tick,
  };
  const j = judge(state, policy, facts);
  const posted = j.verdict === 'Permitted';
  // Version 2 counts an obligation with repair duties as the duties its breach would
  // create, so that no breach takes the party past the limit (the owed list, and every
  // outcome that carries it, stays bounded); version 1 counted each obligation once.
  const countRepairs = op.v >= 2;
  const owedList = state.owed.get(party) ?? [];
  const owed = countRepairs ? owedFootprint(owedList) : owedList.length;
  const owing = !posted || !j.permission ? 0 : countRepairs ? j.permission.obligations.reduce((n, def) => n + Math.max(1, def.repair.length), 0) : j.permission.obligations.length;
  if (owing > 0 && owed + owing > LIMITS.obligationsOwedMax) {
    if (!countRepairs) return substrate(`The party already owes ${owed} obligations; this intent would add ${owing}, beyond the limit of ${LIMITS.obligationsOwedMax}. Discharge some first.`);
    return substrate(`The party's obligations count ${owed} against its limit of ${LIMITS.obligationsOwedMax} (an obligation with repair duties counts as the duties its breach would create); this intent would add ${owing}. Discharge some first.`);
  }
  let created: string[] = [];
  if (posted) {
    commitPostings(state, postings.plans);
    commitUsage(state, usage.plans);
    if (j.discharges) discharge(state, j.discharges, op.transaction);
    if (j.permission) created = createObligations(state, j.permission, policy, party, op.transaction, countRepairs);
  }

  const outcome: Outcome = {
    transaction: op.transaction,
    verdict: j.verdict,
    posted,
    policy: policy.id,
    obligations_pending: pendingFor(state, party),
    justification_hash: op.justification_hash,
    provenance: {
      tick: state.tick,
      log_index: logIndex,
      authority: { issuer: op.authority.issuer, token_id: op.authority.token_id, capability },
      prohibitions_checked: j.prohibitions_checked,
      winning_rule: j.winning_rule,
      ...(j.basis === undefined ? {} : { basis: j.basis }),
      obligations_discharged: posted && j.discharges ? [j.discharges.id] : [],
      obligations_created: created,
      policy: { id: policy.id, bundle_hash: policy.bundle_hash },
    },
  };
  state.record(logIndex, record(op, party, outcome));
  return ok({ kind: 'recorded', outcome });
}

/**
 * Why a pin fails against the policy in force (`active`, null when none is), or null
 * when it names it. The gateway asks this before proposing, the commit point again.
 */
export function pinFailure(pinned: string, active: string | null): { ok: false; error: LedgerError } | null {
  if (active === null) return fail('no_active_policy', `No policy is in force; the intent pinned ${pinned}.`, { pinned, active: null });
  if (pinned !== active) return fail('policy_pin_mismatch', `The pinned policy ${pinned} is not the policy in force (${active}).`, { pinned, active });
  return null;
}

/** The policy in force if the pin names it; otherwise the pin failure. */
export function checkPin(state: State, pinned: string): Result<Policy> {
  const active = state.activePolicy;
  const failure = pinFailure(pinned, active);
  if (failure) return failure;
  const policy = state.policies.get(active!);
  assert(policy !== undefined, `the active policy ${active} is stored`);
  return ok(policy);
}

/**
 * Mandate charges, and actions a rule of the policy marks single_currency, move one
 * currency: the refusal of legs in several (422 `multi_currency_mandate_charge`), or
 * null. The dry run asks it of recorded intents too.
 */
export function singleCurrencyRefusal(policy: Pick<Policy, 'compiled'>, action: string, entries: SubmitIntent['entries']): string | null {
  const rule = action === 'mandate.charge' ? null : policy.compiled.rules.find((r) => r.single_currency && matchesPattern(r.action, action));
  if (action !== 'mandate.charge' && rule === undefined) return null;
  const currencies = [...legTotals(entries).keys()].sort(); // named in one order, as sent or as recorded
  if (currencies.length <= 1) return null;
  const why = rule ? `Action ${action} moves one currency (rule ${rule.id} is single_currency)` : 'A mandate charge moves one currency';
  return `${why}; this intent has legs in ${currencies.join(' and ')}.`;
}

function record(op: SubmitIntent, party: string, outcome: Outcome): TransactionRecord {
  const r: TransactionRecord = {
    transaction: op.transaction,
    agent: op.agent,
    party,
    action: op.action,
    entries: op.entries,
    evidence: op.evidence,
    outcome,
    // Set by the hash chain once the entry that recorded it is hashed.
    entry_hash: '',
  };
  if (op.consume_usage) r.consume_usage = op.consume_usage;
  if (op.meter_usage) r.meter_usage = op.meter_usage;
  if (op.bill_usage) r.bill_usage = op.bill_usage;
  return r;
}
