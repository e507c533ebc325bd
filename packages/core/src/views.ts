/**
 * Read views of recorded facts, as the agent and admin planes serve them.
 */
import type { Obligation, Outcome, TransactionRecord } from './state.js';

/** The outcome as answered on the wire: the recorded outcome with its entry hash. */
export function outcomeView(r: TransactionRecord): Outcome & { provenance: { entry_hash: string } } {
  return outcomeWithHash(r.outcome, r.entry_hash);
}

/** An outcome with the entry hash of the log entry that recorded it, in the provenance. */
export function outcomeWithHash(outcome: Outcome, entry_hash: string): Outcome & { provenance: { entry_hash: string } } {
  const { tick, log_index, ...rest } = outcome.provenance;
  return { ...outcome, provenance: { tick, log_index, entry_hash, ...rest } };
}

/** A recorded transaction: its outcome and provenance, and what the intent asked for. */
export function transactionView(r: TransactionRecord) {
  return {
    ...outcomeView(r),
    agent: r.agent,
    party: r.party,
    action: r.action,
    entries: r.entries,
    ...(r.consume_usage ? { consume_usage: r.consume_usage } : {}),
    ...(r.meter_usage ? { meter_usage: r.meter_usage } : {}),
    ...(r.bill_usage ? { bill_usage: r.bill_usage } : {}),
    evidence: r.evidence,
  };
}

/** An obligation in full, for the obligations read. */
export function obligationView(o: Obligation) {
  return {
    id: o.id,
    rule: o.rule,
    action: o.action,
    transaction: o.transaction,
    created_tick: o.created_tick,
    deadline_tick: o.deadline_tick,
    state: o.state,
    repair_of: o.repair_of,
    blocks: o.blocks,
    discharged_by: o.discharged_by,
    discharged_at_tick: o.discharged_at_tick,
    breached_at_tick: o.breached_at_tick,
    policy: o.policy,
  };
}
