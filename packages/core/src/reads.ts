/**
 * Prefetch: what an operation will read, named before it is applied (store.ts). Each
 * call answers what the view still lacks; a key whose name depends on another record
 * (the transaction's key on the agent's party) is named once that record is loaded,
 * so the store calls `reads` until it answers nothing. Every key `apply` reads must be
 * named here: `apply` throws on any other (NotPrefetched), and the tests run in a
 * store that loads nothing else.
 */
import type { Operation, SubmitIntent } from './ops.js';
import { duePrefix, META_KEYS, obligationKey, scoped } from './state.js';
import { dueEntry } from './obligations.js';
import { TABLES, type ReadSet, type View } from './store.js';

const MISSING = Symbol('missing');

/** Collects what the view lacks; `get` answers a loaded record, or MISSING after naming its key. */
class Needs {
  readonly keys = new Set<string>();
  readonly prefixes = new Set<string>();
  constructor(private readonly view: View) {}

  get(key: string): unknown {
    if (this.view.has(key)) return this.view.get(key);
    this.keys.add(key);
    return MISSING;
  }

  scan(prefix: string): string[] | typeof MISSING {
    if (this.view.hasScan(prefix)) return this.view.scan(prefix);
    this.prefixes.add(prefix);
    return MISSING;
  }
}

/** The keys and prefixes the operation will read that the view does not hold yet. */
export function reads(view: View, op: Operation): ReadSet {
  const n = new Needs(view);
  for (const k of META_KEYS) n.get(k);
  switch (op.type) {
    case 'SubmitIntent':
      intentReads(n, op);
      break;
    case 'Tick':
      tickReads(n, view);
      break;
    case 'AddTrustRoot':
    case 'RemoveTrustRoot':
      n.get(TABLES.root.prefix + op.issuer);
      break;
    case 'AddParty':
      n.get(TABLES.party.prefix + op.id);
      break;
    case 'BindAgent':
      n.get(TABLES.party.prefix + op.party);
      n.get(TABLES.agent.prefix + op.agent);
      break;
    case 'UnbindAgent':
      n.get(TABLES.agent.prefix + op.agent);
      break;
    case 'OpenAccount':
      n.get(TABLES.account.prefix + op.id);
      if (op.party !== undefined) n.get(TABLES.party.prefix + op.party);
      break;
    case 'OpenUsage':
      n.get(TABLES.usage.prefix + op.id);
      if (op.owner !== undefined) n.get(TABLES.party.prefix + op.owner);
      break;
    default: {
      // The policy lifecycle: the policy, and for an activation the one it supersedes.
      n.get(TABLES.policy.prefix + op.id);
      const active = n.get(META_KEYS[1]);
      if (op.type === 'ActivatePolicy' && typeof active === 'string') n.get(TABLES.policy.prefix + active);
    }
  }
  return { keys: [...n.keys], prefixes: [...n.prefixes] };
}

function intentReads(n: Needs, op: SubmitIntent): void {
  const party = n.get(TABLES.agent.prefix + op.agent);
  n.get(TABLES.root.prefix + op.authority.issuer);
  const active = n.get(META_KEYS[1]);
  if (typeof active === 'string') n.get(TABLES.policy.prefix + active);
  if (typeof party !== 'string') return; // not loaded yet, or not bound (then nothing more is read)
  n.get(TABLES.transaction.prefix + scoped(party, op.transaction));
  n.get(TABLES.owed.prefix + party);
  const named = op.action.bindings.obligation;
  if (named !== undefined) {
    const tick = n.get(TABLES.obligationTick.prefix + scoped(party, String(named)));
    if (typeof tick === 'number') n.get(obligationKey(tick, party, String(named)));
  }
  for (const e of op.entries) n.get(TABLES.account.prefix + e.account);
  for (const m of [op.consume_usage, op.meter_usage, op.bill_usage]) if (m) n.get(TABLES.usage.prefix + m.usage);
}

/** A tick breaches what is due at the tick it leaves: those obligations, and what their parties owe. */
function tickReads(n: Needs, view: View): void {
  const tick = view.has(META_KEYS[0]) ? ((view.get(META_KEYS[0]) as number | undefined) ?? 0) : MISSING;
  if (tick === MISSING) return;
  const keys = n.scan(duePrefix(tick));
  if (keys === MISSING) return;
  for (const due of keys) {
    const { key, party } = dueEntry(due, tick);
    n.get(key);
    n.get(TABLES.owed.prefix + party);
  }
}
