/**
 * The normative law: judging an intent under the policy in force.
 *
 * The order is fixed, so the same intent and state give the same verdict on every
 * replica:
 *   1. an outstanding repair duty whose `blocks` match the action refuses it
 *      (RepairOutstandingRejected), unless the intent is a repair: it names a
 *      repair duty the party owes, with that duty's action;
 *   2. a prohibition whose action matches and whose conditions hold refuses it
 *      (ForbiddenRejected); a condition that cannot be evaluated counts as holding;
 *   3. an intent that names an obligation (binding `obligation`) is judged by that
 *      obligation: discharged (Permitted) or not (ObligationUnmetRejected);
 *   4. a permission whose action matches and whose conditions hold permits it; a
 *      condition that cannot be evaluated counts as not holding;
 *   5. otherwise no permission covers it (NotPermittedRejected, default deny).
 * Within each step the winning rule is the lowest priority, then the one with the
 * most conditions, then the smaller id by bytes (the compiled bundle's order).
 */
import { matchesPattern } from '../patterns.js';
import type { Obligation, OwedEntry, Policy, State, Verdict } from '../state.js';
import { compareBytes, DEFAULT_DENY, UNKNOWN_OBLIGATION, type CompiledCondition, type CompiledRule } from './bundle.js';
import { owedBy } from '../obligations.js';
import { describeFailed, describeHeld, evaluate, type Facts } from './conditions.js';

export interface Judgement {
  verdict: Verdict;
  winning_rule: string;
  /** basis is set for refusals: why, with the real figures. */
  basis?: string;
  prohibitions_checked: string[];
  /** permission is the winning permission rule, whose obligations a posting creates. */
  permission?: CompiledRule;
  /** discharges is the obligation a permitted intent discharges. */
  discharges?: Obligation;
}

export function judge(state: State, policy: Policy, facts: Facts): Judgement {
  const named = facts.bindings.obligation;
  const blocking = blockingRepair(state, facts, named);
  if (blocking) {
    return {
      verdict: 'RepairOutstandingRejected',
      winning_rule: blocking.rule,
      basis: `Repair duty ${blocking.id} (${blocking.action}, due by tick ${blocking.deadline_tick}) is outstanding and blocks ${facts.action}.`,
      prohibitions_checked: prohibitionsFor(policy, facts.action).map((r) => r.id),
    };
  }
  if (named === undefined) return judgeByRules(policy, facts);
  const { forbidden, checked } = prohibit(policy, facts);
  if (forbidden) return forbidden;
  return { ...judgeDischarge(state, facts, String(named)), prohibitions_checked: checked };
}

/**
 * Steps 2, 4 and 5 alone: prohibitions, permissions, default deny. This is the
 * whole judgement of an intent that names no obligation while the party owes no
 * blocking repair, and what a dry run of a draft bundle evaluates.
 */
export function judgeByRules(policy: Policy | { id: string; compiled: Policy['compiled'] }, facts: Facts): Judgement {
  const { forbidden, checked } = prohibit(policy, facts);
  if (forbidden) return forbidden;
  const misses: string[] = [];
  for (const rule of policy.compiled.rules) {
    if (rule.modality !== 'permission' || !matchesPattern(rule.action, facts.action)) continue;
    const failed = firstFailure(rule.when, facts);
    if (failed === null) return { verdict: 'Permitted', winning_rule: rule.id, prohibitions_checked: checked, permission: rule };
    misses.push(`rule ${rule.id} does not apply because ${failed}`);
  }
  const detail = misses.length > 0 ? `; ${misses.join('; ')}` : '';
  return {
    verdict: 'NotPermittedRejected',
    winning_rule: DEFAULT_DENY,
    basis: `No permission of policy ${policy.id} covers ${facts.action}${detail}.`,
    prohibitions_checked: checked,
  };
}

function prohibitionsFor(policy: { compiled: Policy['compiled'] }, action: string): CompiledRule[] {
  return policy.compiled.rules.filter((r) => r.modality === 'prohibition' && matchesPattern(r.action, action));
}

/** The prohibitions whose action matches (checked), and the refusal of the first that applies. */
function prohibit(policy: { compiled: Policy['compiled'] }, facts: Facts): { forbidden: Judgement | null; checked: string[] } {
  const prohibitions = prohibitionsFor(policy, facts.action);
  const checked = prohibitions.map((r) => r.id);
  for (const rule of prohibitions) {
    const held = conditionsFailClosed(rule.when, facts);
    if (held) {
      return { forbidden: { verdict: 'ForbiddenRejected', winning_rule: rule.id, basis: prohibitionBasis(rule, held), prohibitions_checked: checked }, checked };
    }
  }
  return { forbidden: null, checked };
}

/**
 * The party's outstanding repair duty that blocks this action, if any (smallest id
 * first). An intent that is a repair (it names a repair duty the party owes, with
 * that duty's action) is blocked by none: a refund duty that blocks purchase.*
 * must not stop the refund of another breached purchase, or two breaches would
 * block each other's repair for good.
 */
function blockingRepair(state: State, facts: Facts, named: unknown): OwedEntry | null {
  const owed = owedBy(state, facts.party);
  const repair = owed.find((o) => o.id === named && o.repair_of !== null && matchesPattern(o.action, facts.action));
  if (repair) return null;
  let found: OwedEntry | null = null;
  for (const o of owed) {
    if (o.repair_of === null) continue;
    if (!o.blocks.some((p) => matchesPattern(p, facts.action))) continue;
    if (found === null || compareBytes(o.id, found.id) < 0) found = o;
  }
  return found;
}

/** Descriptions of the conditions when all hold or cannot be evaluated; null when one is false. */
function conditionsFailClosed(when: CompiledCondition[], facts: Facts): string[] | null {
  const held: string[] = [];
  for (const c of when) {
    const e = evaluate(c, facts);
    if (e.holds === false) return null;
    held.push(describeHeld(c, e, facts.action));
  }
  return held;
}

/** The first condition that does not hold (or cannot be evaluated), described; null when all hold. */
function firstFailure(when: CompiledCondition[], facts: Facts): string | null {
  for (const c of when) {
    const e = evaluate(c, facts);
    if (e.holds !== true) return describeFailed(c, e);
  }
  return null;
}

function prohibitionBasis(rule: CompiledRule, held: string[]): string {
  if (held.length === 0) return rule.basis;
  const limit = /(exceeds|reaches) the \S+ limit$/.test(held[held.length - 1]!);
  return `${held.join('; ')}${limit ? ' of' : ' under'} rule ${rule.id}`;
}

function judgeDischarge(state: State, facts: Facts, id: string): Omit<Judgement, 'prohibitions_checked'> {
  // Obligations are kept per party: another party's is not even looked at.
  const o = state.obligation(facts.party, id);
  const unmet = (winning_rule: string, basis: string) => ({ verdict: 'ObligationUnmetRejected' as const, winning_rule, basis });
  if (!o) {
    // The same words whether the obligation does not exist or is another party's.
    return unmet(UNKNOWN_OBLIGATION, `No obligation ${id} is owed by this party.`);
  }
  if (o.state === 'discharged') {
    return unmet(o.rule, `Obligation ${id} was already discharged at tick ${o.discharged_at_tick} by ${o.discharged_by}.`);
  }
  if (o.state === 'breached' && o.repair_of === null) {
    const after = o.repair.length > 0 ? '; its repair duties are owed instead' : ' and can no longer be discharged';
    return unmet(o.rule, `Obligation ${id} was breached at tick ${o.breached_at_tick}${after}.`);
  }
  if (!matchesPattern(o.action, facts.action)) {
    return unmet(o.rule, `Obligation ${id} is discharged by ${o.action}, not by ${facts.action}.`);
  }
  const failed = firstFailure(o.discharge_when, facts);
  if (failed !== null) return unmet(o.rule, `Obligation ${id} is not discharged: ${failed}.`);
  return { verdict: 'Permitted', winning_rule: o.rule, discharges: o };
}
