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
 */
import type { CompiledRule } from './policy/bundle.js';
import { assert } from './errors.js';
import { compareBytes } from './policy/bundle.js';
import type { Obligation, PendingObligation, Policy, State } from './state.js';

/** Whether the party still owes it: open, or a breached repair duty. */
export function isOwed(o: Obligation): boolean {
  return o.state === 'open' || (o.state === 'breached' && o.repair_of !== null);
}

/** The obligations a party still owes, in the order they were created. */
export function owedBy(state: State, party: string): Obligation[] {
  const ids = state.owed.get(party);
  if (!ids) return [];
  return [...ids].map((id) => state.obligations.get(id)!);
}

function index(state: State, o: Obligation): void {
  let ids = state.owed.get(o.party);
  if (!ids) state.owed.set(o.party, (ids = new Set()));
  if (isOwed(o)) ids.add(o.id);
  else ids.delete(o.id);
  if (ids.size === 0) state.owed.delete(o.party);
}

/** Rebuilds the derived index after a restore. */
export function reindexObligations(state: State): void {
  state.owed.clear();
  for (const o of state.obligations.values()) if (isOwed(o)) index(state, o);
}

/** Creates the obligations a permitted intent owes under its winning rule; returns their ids. */
export function createObligations(state: State, rule: CompiledRule, policy: Policy, party: string, transaction: string): string[] {
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
    assert(!state.obligations.has(o.id), `obligation id ${o.id} is unique`);
    state.obligations.set(o.id, o);
    index(state, o);
    return o.id;
  });
}

export function discharge(state: State, o: Obligation, transaction: string): void {
  o.state = 'discharged';
  o.discharged_by = transaction;
  o.discharged_at_tick = state.tick;
  index(state, o);
}

export interface Breach {
  obligation: string;
  party: string;
  rule: string;
  repairs_created: string[];
}

/**
 * Breaches every open obligation whose deadline has passed (deadline < tick), in
 * order of id by bytes, and creates its repair duties. Returns the breaches.
 */
export function sweepDeadlines(state: State): Breach[] {
  const due: Obligation[] = [];
  for (const ids of state.owed.values()) {
    for (const id of ids) {
      const o = state.obligations.get(id)!;
      if (o.state === 'open' && o.deadline_tick < state.tick) due.push(o);
    }
  }
  due.sort((a, b) => compareBytes(a.id, b.id));
  return due.map((o) => {
    o.state = 'breached';
    o.breached_at_tick = state.tick;
    index(state, o);
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
      assert(!state.obligations.has(r.id), `repair duty id ${r.id} is unique`);
      state.obligations.set(r.id, r);
      index(state, r);
      return r.id;
    });
    return { obligation: o.id, party: o.party, rule: o.rule, repairs_created };
  });
}

export function pendingView(o: Obligation): PendingObligation {
  const v: PendingObligation = { id: o.id, rule: o.rule, action: o.action, deadline_tick: o.deadline_tick, state: o.state };
  if (o.repair_of !== null) v.repair_of = o.repair_of;
  return v;
}

/** Every obligation the party now owes, by deadline then id. */
export function pendingFor(state: State, party: string): PendingObligation[] {
  return owedBy(state, party)
    .sort((a, b) => a.deadline_tick - b.deadline_tick || compareBytes(a.id, b.id))
    .map(pendingView);
}
