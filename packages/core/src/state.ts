/**
 * The ledger state: everything `apply` reads and writes. It is a deterministic
 * function of the operations applied so far. Maps keep insertion order, which is the
 * log's order on every replica; any output whose order matters is sorted explicitly.
 */
import type { Action, Entry, UsageMove } from './schema.js';
import type { CompiledBundle, CompiledCondition, CompiledRepair } from './policy/bundle.js';

export interface Party {
  id: string;
}

export interface TrustRoot {
  issuer: string;
  /** public_key is the issuer's Ed25519 key as PASERK `k4.public`. */
  public_key: string;
  /** key_id is the PASERK `k4.pid` of the key. */
  key_id: string;
}

/** Totals of one currency of an account. Invariant: 0 <= debits, credits <= COUNTER_MAX. */
export interface CurrencyTotals {
  debits: bigint;
  credits: bigint;
}

export interface Account {
  id: string;
  /** party owns the account; null for a house account any party's legs may post to. */
  party: string | null;
  totals: Map<string, CurrencyTotals>;
}

/** Invariant after every commit: 0 <= billed <= metered <= consumed <= COUNTER_MAX. */
export interface Usage {
  id: string;
  currency: string;
  /** owner is the only party that may move or read the balance; null: nobody may. */
  owner: string | null;
  consumed: bigint;
  metered: bigint;
  billed: bigint;
}

export type PolicyState = 'draft' | 'reviewed' | 'approved' | 'active' | 'superseded';

export interface PolicyEvent {
  action: 'draft' | 'review' | 'approve' | 'activate' | 'supersede';
  by: string;
  tick: number;
  log_index: number;
  comment?: string;
}

export interface Policy {
  id: string;
  /** bundle is the rule bundle exactly as authored; its hash is bundle_hash. */
  bundle: unknown;
  bundle_hash: string;
  /** compiled is derived from bundle; it is not part of a snapshot. */
  compiled: CompiledBundle;
  state: PolicyState;
  author: string;
  reviewer: string | null;
  approver: string | null;
  activated_at_tick: number | null;
  superseded_at_tick: number | null;
  history: PolicyEvent[];
}

export type ObligationState = 'open' | 'discharged' | 'breached';

export interface Obligation {
  id: string;
  /** party owes the obligation: the party of the agent whose intent created it. */
  party: string;
  /** rule is the id of the rule that imposed it, in policy.id. */
  rule: string;
  policy: { id: string; bundle_hash: string };
  action: string;
  /** transaction created the obligation (or, for a repair duty, the breached one). */
  transaction: string;
  created_tick: number;
  /** deadline_tick is the last tick at which it may be discharged on time. */
  deadline_tick: number;
  state: ObligationState;
  /** repair_of is the breached obligation this repair duty answers; null for a primary one. */
  repair_of: string | null;
  /** blocks are the action patterns refused while this repair duty is outstanding. */
  blocks: string[];
  discharge_when: CompiledCondition[];
  /** repair are the duties instantiated when this obligation is breached. */
  repair: CompiledRepair[];
  discharged_by: string | null;
  discharged_at_tick: number | null;
  breached_at_tick: number | null;
}

export type Verdict = 'Permitted' | 'ForbiddenRejected' | 'NotPermittedRejected' | 'RepairOutstandingRejected' | 'ObligationUnmetRejected';

export interface PendingObligation {
  id: string;
  rule: string;
  action: string;
  deadline_tick: number;
  state: ObligationState;
  repair_of?: string;
}

export interface Provenance {
  tick: number;
  log_index: number;
  authority: { issuer: string; token_id: string; capability: string };
  prohibitions_checked: string[];
  winning_rule: string;
  /** basis is the human-readable reason of a refusal. */
  basis?: string;
  obligations_discharged: string[];
  obligations_created: string[];
  policy: { id: string; bundle_hash: string };
}

/** The outcome of a judged intent, as recorded. The entry hash is kept beside it. */
export interface Outcome {
  transaction: string;
  verdict: Verdict;
  posted: boolean;
  policy: string;
  obligations_pending: PendingObligation[];
  justification_hash: string;
  provenance: Provenance;
}

/** A recorded transaction: a posting or a refusal. Immutable once recorded. */
export interface TransactionRecord {
  transaction: string;
  agent: string;
  party: string;
  action: Action;
  entries: Entry[];
  consume_usage?: UsageMove;
  meter_usage?: UsageMove;
  bill_usage?: UsageMove;
  evidence: string[];
  outcome: Outcome;
  /** entry_hash is the hash-chain link of the log entry that recorded it. */
  entry_hash: string;
}

export interface State {
  /** tick is the ledger's clock; each Tick operation advances it by one. */
  tick: number;
  parties: Map<string, Party>;
  /** agents maps a bound agent URI to its party. */
  agents: Map<string, string>;
  trustRoots: Map<string, TrustRoot>;
  accounts: Map<string, Account>;
  usages: Map<string, Usage>;
  /** transactions in the order they were recorded. */
  transactions: Map<string, TransactionRecord>;
  policies: Map<string, Policy>;
  /** activePolicy is the id of the policy in force, or null before the first activation. */
  activePolicy: string | null;
  /** obligations in the order they were created. */
  obligations: Map<string, Obligation>;
  /**
   * owed indexes, per party, the obligations it still owes: open ones and breached
   * repair duties. Derived from obligations; rebuilt on restore, not snapshotted.
   */
  owed: Map<string, Set<string>>;
}

export function emptyState(): State {
  return {
    tick: 0,
    parties: new Map(),
    agents: new Map(),
    trustRoots: new Map(),
    accounts: new Map(),
    usages: new Map(),
    transactions: new Map(),
    policies: new Map(),
    activePolicy: null,
    obligations: new Map(),
    owed: new Map(),
  };
}
