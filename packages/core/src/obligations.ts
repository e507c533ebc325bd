/**
 * Obligations with deadlines and repair duties.
 *
 * A permitted intent creates the obligations of its winning rule, owed by the acting
 * party, due by `commit tick + deadline_ticks`. A later intent that names one
 * (binding `obligation`) and meets its `discharge_when` discharges it. When a tick
 * advance passes a deadline, the open obligation is breached at that tick and its
 * repair duties are created; an outstanding repair duty blocks the actions its
 * `blocks` patterns match until it is discharged. A breached repair duty stays
 * owed (and blocking), and may still be discharged late: it is the only way out.
 *
 * Two indexes are kept in step with every change, so that no operation scans the
 * obligations: the owed index (per party, a summary of what it owes, bounded by
 * LIMITS.obligationsOwedMax) and the deadline index (open obligations by deadline
 * tick: a tick advance reads exactly the ones it breaches).
 */
import type { CompiledRule } from './policy/bundle.js';
import { assert } from './errors.js';
import { compareBytes } from './policy/bundle.js';
import { duePrefix, type Obligation, type OwedEntry, type PendingObligation, type Policy, type State } from './state.js';
import { TABLES } from './store.js';

/** Whether the party still owes it: open, or a breached repair duty. */
export function isOwed(o: Pick<Obligation, 'state' | 'repair_of'>): boolean {
  return o.state === 'open' || (o.state === 'breached' && o.repair_of !== null);
}

/** The obligations a party owes, as the owed index summarizes them, in creation order. */
export function owedBy(state: State, party: string): OwedEntry[] {
  return state.owed.get(party) ?? [];
}

function owedEntry(o: Obligation, repairs: number): OwedEntry {
  const e: OwedEntry = { id: o.id, rule: o.rule, action: o.action, deadline_tick: o.deadline_tick, state: o.state, repair_of: o.repair_of, blocks: o.blocks };
  if (repairs > 0 && o.state === 'open' && o.repair_of === null) e.repairs = repairs;
  return e;
}

/**
 * What a party's owed obligations count against its limit: one each, but an open
 * obligation whose breach would create repair duties counts as those duties. A breach
 * then replaces it by as many as it counted, so no breach takes the party past the
 * limit.
 */
export function owedFootprint(owed: readonly OwedEntry[]): number {
  return owed.reduce((n, e) => n + Math.max(1, e.repairs ?? 0), 0);
}

/**
 * Stores an obligation's new state and brings the indexes in step: it enters, stays
 * in or leaves its party's owed list, and leaves the deadline index once not open.
 * `before` is its previous state, or null for a new one.
 */
function save(state: State, o: Obligation, before: Obligation | null, repairs = 0): void {
  state.putObligation(o, before === null);
  const list = owedBy(state, o.party);
  const at = list.findIndex((e) => e.id === o.id);
  let next: OwedEntry[] = list;
  if (isOwed(o)) next = at < 0 ? [...list, owedEntry(o, repairs)] : list.map((e, k) => (k === at ? owedEntry(o, e.repairs ?? 0) : e));
  else if (at >= 0) next = list.filter((_, k) => k !== at);
  if (next !== list) {
    if (next.length === 0) state.owed.delete(o.party);
    else state.owed.set(o.party, next);
  }
  if (before === null && o.state === 'open') state.addDue(o);
  if (before !== null && before.state === 'open' && o.state !== 'open') state.removeDue(before);
}

/**
 * Creates the obligations a permitted intent owes under its winning rule; returns their
 * ids. `countRepairs` (an intent of version 2) records in the owed index what each
 * counts against the party's limit.
 */
export function createObligations(state: State, rule: CompiledRule, policy: Policy, party: string, transaction: string, countRepairs: boolean): string[] {
  return rule.obligations.map((def) => {
    const o: Obligation = {
      id: `obl_${transaction}_${def.id}`,
      party,
      rule: rule.id,
      policy: { id: policy.id, bundle_hash: policy.bundle_hash },
      action: def.action,
      transaction,
      created_tick: state.tick,
      deadline_tick: state.tick + def.deadline_ticks,
      state: 'open',
      repair_of: null,
      blocks: [],
      discharge_when: def.discharge_when,
      repair: def.repair,
      discharged_by: null,
      discharged_at_tick: null,
      breached_at_tick: null,
    };
    // The id is unique within the party: its transaction id is (the store checks new keys).
    save(state, o, null, countRepairs ? def.repair.length : 0);
    return o.id;
  });
}

export function discharge(state: State, o: Obligation, transaction: string): void {
  save(state, { ...o, state: 'discharged', discharged_by: transaction, discharged_at_tick: state.tick }, o);
}

export interface Breach {
  obligation: string;
  party: string;
  rule: string;
  repairs_created: string[];
}

/** The obligation a deadline-index key names: the key it is stored under, and its party. */
export function dueEntry(key: string, deadline: number): { key: string; party: string } {
  const prefix = duePrefix(deadline);
  const rest = key.slice(prefix.length); // <created tick, 12 hex>/<party>/<id>
  const slash = rest.indexOf('/', 13);
  assert(key.startsWith(prefix) && rest[12] === '/' && slash > 13, `${key} is a deadline-index key of tick ${deadline}`);
  return { key: TABLES.obligation.prefix + rest, party: rest.slice(13, slash) };
}

/**
 * Breaches every open obligation whose deadline has passed, and creates its repair
 * duties: after the tick advanced to `state.tick`, those due at `state.tick - 1`
 * (every earlier deadline was swept by an earlier tick, since a deadline is never
 * before the tick that created it). In order of id by bytes, then party.
 */
export function sweepDeadlines(state: State): Breach[] {
  const deadline = state.tick - 1;
  const due = state.dueAt(deadline).map((key) => {
    const o = state.obligationAt(dueEntry(key, deadline).key);
    assert(o !== undefined && o.state === 'open' && o.deadline_tick === deadline, `the deadline index entry ${key} names an open obligation`);
    return o;
  });
  due.sort((a, b) => compareBytes(a.id, b.id) || compareBytes(a.party, b.party));
  return due.map((o) => {
    save(state, { ...o, state: 'breached', breached_at_tick: state.tick }, o);
    const repairs_created = o.repair.map((d) => {
      const r: Obligation = {
        id: `${o.id}/${d.id}`,
        party: o.party,
        rule: o.rule,
        policy: o.policy,
        action: d.action,
        transaction: o.transaction,
        created_tick: state.tick,
        deadline_tick: state.tick + d.deadline_ticks,
        state: 'open',
        repair_of: o.id,
        blocks: d.blocks,
        discharge_when: d.discharge_when,
        repair: [],
        discharged_by: null,
        discharged_at_tick: null,
        breached_at_tick: null,
      };
      save(state, r, null);
      return r.id;
    });
    return { obligation: o.id, party: o.party, rule: o.rule, repairs_created };
  });
}

export function pendingView(o: Pick<Obligation, 'id' | 'rule' | 'action' | 'deadline_tick' | 'state' | 'repair_of'>): PendingObligation {
  const v: PendingObligation = { id: o.id, rule: o.rule, action: o.action, deadline_tick: o.deadline_tick, state: o.state };
  if (o.repair_of !== null) v.repair_of = o.repair_of;
  return v;
}

/** Every obligation the party now owes, by deadline then id. */
export function pendingFor(state: State, party: string): PendingObligation[] {
  return [...owedBy(state, party)]
    .sort((a, b) => a.deadline_tick - b.deadline_tick || compareBytes(a.id, b.id))
    .map(pendingView);
}
