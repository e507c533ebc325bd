/**
 * Administrative operations: trust roots, parties, agent bindings, accounts, usage
 * balances, and the policy lifecycle draft -> reviewed -> approved -> active
 * (-> superseded) with four eyes. They go through the log like intents do; the
 * principal's name is recorded with each one.
 */
import { accountView, type AccountView } from './journal.js';
import { fail, ok, type Result } from './errors.js';
import { REQUIRED_ROLES, type AdminOperation, type Principal } from './ops.js';
import { bundleHash, compileBundle } from './policy/bundle.js';
import type { Policy, PolicyEvent, State } from './state.js';
import { usageReport, type UsageReport } from './usage.js';

/** A policy as the planes answer it: everything but its derived compiled form. */
export type PolicyView = Omit<Policy, 'compiled'>;

export type AdminValue =
  | { issuer: string; key_id: string }
  | { id: string }
  | { agent: string; party: string | null }
  | AccountView
  | (UsageReport & { owner: string | null })
  | PolicyView;

export function policyView(p: Policy): PolicyView {
  return {
    id: p.id,
    state: p.state,
    bundle_hash: p.bundle_hash,
    author: p.author,
    reviewer: p.reviewer,
    approver: p.approver,
    activated_at_tick: p.activated_at_tick,
    superseded_at_tick: p.superseded_at_tick,
    history: [...p.history],
    bundle: p.bundle,
  };
}

/** Whether the principal holds one of the roles the operation needs; the gateway asks first. */
export function mayPropose(by: Principal, type: AdminOperation['type']): boolean {
  return REQUIRED_ROLES[type].some((r) => by.roles.includes(r));
}

/** Why a principal may not propose an operation. */
export function roleRefusal(by: Principal, type: AdminOperation['type']): string {
  return `${by.name} may not do ${type} (it needs the ${REQUIRED_ROLES[type].join(' or ')} role).`;
}

export function applyAdmin(state: State, op: AdminOperation, logIndex: number): Result<AdminValue> {
  if (!mayPropose(op.by, op.type)) return fail('forbidden', roleRefusal(op.by, op.type));
  switch (op.type) {
    case 'AddTrustRoot':
      if (state.trustRoots.has(op.issuer)) return exists('Trust root', op.issuer);
      state.trustRoots.set(op.issuer, { issuer: op.issuer, public_key: op.public_key, key_id: op.key_id });
      return ok({ issuer: op.issuer, key_id: op.key_id });
    case 'RemoveTrustRoot': {
      const root = state.trustRoots.get(op.issuer);
      if (!root) return fail('unknown_trust_root', `No trust root ${op.issuer} is registered.`);
      state.trustRoots.delete(op.issuer);
      return ok({ issuer: root.issuer, key_id: root.key_id });
    }
    case 'AddParty':
      if (state.parties.has(op.id)) return exists('Party', op.id);
      state.parties.set(op.id, { id: op.id });
      return ok({ id: op.id });
    case 'BindAgent':
      if (!state.parties.has(op.party)) return fail('unknown_party', `No party ${op.party} exists.`, { id: op.party });
      if (state.agents.has(op.agent)) return exists('Agent binding', op.agent);
      state.agents.set(op.agent, op.party);
      return ok({ agent: op.agent, party: op.party });
    case 'UnbindAgent':
      if (!state.agents.has(op.agent)) return fail('unknown_binding', `The agent ${op.agent} is not bound.`);
      state.agents.delete(op.agent);
      return ok({ agent: op.agent, party: null });
    case 'OpenAccount': {
      if (state.accounts.has(op.id)) return exists('Account', op.id);
      if (op.party !== undefined && !state.parties.has(op.party)) return fail('unknown_party', `No party ${op.party} exists.`, { id: op.party });
      const account = { id: op.id, party: op.party ?? null, totals: [] };
      state.accounts.set(op.id, account);
      return ok(accountView(account));
    }
    case 'OpenUsage': {
      if (state.usages.has(op.id)) return exists('Usage balance', op.id);
      if (op.owner !== undefined && !state.parties.has(op.owner)) return fail('unknown_party', `No party ${op.owner} exists.`, { id: op.owner });
      const usage = { id: op.id, currency: op.currency, owner: op.owner ?? null, consumed: 0n, metered: 0n, billed: 0n };
      state.usages.set(op.id, usage);
      return ok({ ...usageReport(usage), owner: usage.owner });
    }
    default:
      return applyLifecycle(state, op, logIndex);
  }
}

function exists(what: string, id: string): Result<never> {
  return fail('already_exists', `${what} ${id} already exists.`, { id });
}

type LifecycleOp = Extract<AdminOperation, { type: 'DraftPolicy' | 'ReviewPolicy' | 'ApprovePolicy' | 'ActivatePolicy' }>;

function applyLifecycle(state: State, op: LifecycleOp, logIndex: number): Result<AdminValue> {
  const event = (action: PolicyEvent['action'], comment?: string): PolicyEvent => ({
    action, by: op.by.name, tick: state.tick, log_index: logIndex, ...(comment === undefined ? {} : { comment }),
  });
  if (op.type === 'DraftPolicy') {
    if (state.policies.has(op.id)) return exists('Policy', op.id);
    const compiled = compileBundle(op.bundle);
    if (!compiled.ok) return fail('invalid_policy', `Policy ${op.id} is not valid: ${compiled.issues[0]!.message}`, { issues: compiled.issues });
    const p: Policy = {
      id: op.id, bundle: op.bundle, bundle_hash: bundleHash(op.bundle), compiled: compiled.bundle, state: 'draft',
      author: op.by.name, reviewer: null, approver: null, activated_at_tick: null, superseded_at_tick: null,
      history: [event('draft')],
    };
    state.policies.set(p.id, p);
    return ok(policyView(p));
  }
  const p = state.policies.get(op.id);
  if (!p) return fail('unknown_policy', `No policy ${op.id} exists.`, { id: op.id });
  const who = op.by.name;
  let next: Policy;
  switch (op.type) {
    case 'ReviewPolicy':
      if (p.state !== 'draft') return transition(p, 'reviewed', 'draft');
      if (who === p.author) return fail('forbidden', `The reviewer of policy ${p.id} must not be its author (${p.author}).`);
      next = { ...p, state: 'reviewed', reviewer: who, history: [...p.history, event('review', op.comment)] };
      break;
    case 'ApprovePolicy':
      if (p.state !== 'reviewed') return transition(p, 'approved', 'reviewed');
      if (who === p.author || who === p.reviewer) {
        return fail('forbidden', `The approver of policy ${p.id} must be neither its author (${p.author}) nor its reviewer (${p.reviewer}).`);
      }
      next = { ...p, state: 'approved', approver: who, history: [...p.history, event('approve', op.comment)] };
      break;
    case 'ActivatePolicy': {
      if (p.state !== 'approved') return transition(p, 'active', 'approved');
      const previous = state.activePolicy === null ? undefined : state.policies.get(state.activePolicy);
      if (previous) {
        state.policies.set(previous.id, {
          ...previous, state: 'superseded', superseded_at_tick: state.tick,
          history: [...previous.history, event('supersede', `superseded by ${p.id}`)],
        });
      }
      next = { ...p, state: 'active', activated_at_tick: state.tick, history: [...p.history, event('activate', op.comment)] };
      state.activePolicy = p.id;
      break;
    }
  }
  state.policies.set(next.id, next);
  return ok(policyView(next));
}

function transition(p: Policy, to: string, from: string): Result<never> {
  return fail('invalid_transition', `Policy ${p.id} is ${p.state}; only a policy that is ${from} can become ${to}.`, { id: p.id, state: p.state });
}
