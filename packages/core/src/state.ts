/**
 * The ledger state: everything `apply` reads and writes, as typed tables over a view
 * of the state store (store.ts). It is a deterministic function of the operations
 * applied so far. Records are immutable values: a change sets a new record. Any
 * output whose order matters is sorted explicitly.
 */
import type { Action, Entry, UsageMove } from './schema.js';
import type { CompiledBundle, CompiledCondition, CompiledRepair } from './policy/bundle.js';
import { assert } from './errors.js';
import { TABLES, hexKey, type View } from './store.js';

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
  /** totals per currency, in byte order of currency. */
  totals: readonly (readonly [currency: string, totals: CurrencyTotals])[];
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
  /** compiled is derived from bundle; it is not stored. */
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
  /** id is unique within the party that owes it: `obl_<transaction>_<obligation>`, `<id>/<repair>`. */
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

/**
 * What the owed index keeps of each obligation a party owes: enough to list it in an
 * outcome and to judge a repair-duty block without loading the obligation itself.
 */
export interface OwedEntry {
  id: string;
  rule: string;
  action: string;
  deadline_tick: number;
  state: ObligationState;
  repair_of: string | null;
  blocks: string[];
  /**
   * repairs: of an open obligation an intent of version 2 created, the repair duties
   * its breach would create, when it has any; it counts that many against the party's
   * limit (intent.ts). Absent otherwise, and on what version 1 created (counted once).
   */
  repairs?: number;
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

/** A table of the state: records of one kind by id, over a view. */
export class Table<T> {
  constructor(private readonly view: View, readonly prefix: string) {}

  key(id: string): string {
    return this.prefix + id;
  }

  get(id: string): T | undefined {
    return this.view.get(this.prefix + id) as T | undefined;
  }

  has(id: string): boolean {
    return this.get(id) !== undefined;
  }

  set(id: string, value: T): void {
    this.view.put(this.prefix + id, value);
  }

  delete(id: string): void {
    this.view.del(this.prefix + id);
  }
}

/** The key of a party-scoped record (a transaction, an obligation). */
export function scoped(party: string, id: string): string {
  return `${party}/${id}`;
}

const TICK_KEY = `${TABLES.meta.prefix}tick`;
const ACTIVE_KEY = `${TABLES.meta.prefix}active`;
/** The meta records every operation may read; a store keeps them at hand. */
export const META_KEYS = [TICK_KEY, ACTIVE_KEY] as const;

/** Where an obligation is stored: under the tick that created it, then its party and id. */
export function obligationKey(created_tick: number, party: string, id: string): string {
  return `${TABLES.obligation.prefix}${hexKey(created_tick, 12)}/${party}/${id}`;
}

/** The deadline index: open obligations by the tick after which they are breached, then where they are stored. */
export function dueKey(o: Pick<Obligation, 'deadline_tick' | 'created_tick' | 'party' | 'id'>): string {
  return `${duePrefix(o.deadline_tick)}${hexKey(o.created_tick, 12)}/${o.party}/${o.id}`;
}

export function duePrefix(deadline: number): string {
  return `${TABLES.due.prefix}${hexKey(deadline, 12)}/`;
}

export function recordedKey(index: number): string {
  return `${TABLES.recorded.prefix}${hexKey(index, 16)}`;
}

/** The ledger state over a view: what `apply` reads and writes. */
export class State {
  readonly parties: Table<Party>;
  /** agents maps a bound agent URI to its party. */
  readonly agents: Table<string>;
  readonly trustRoots: Table<TrustRoot>;
  readonly accounts: Table<Account>;
  readonly usages: Table<Usage>;
  readonly policies: Table<Policy>;
  /** where each transaction was recorded: its log index, by `scoped(party, transaction id)`. */
  readonly transactions: Table<number>;
  /** the tick that created each obligation (where it is stored), by `scoped(party, obligation id)`. */
  private readonly obligationTicks: Table<number>;
  /** owed indexes, per party, what it still owes (open obligations, breached repair duties), in creation order. */
  readonly owed: Table<OwedEntry[]>;

  constructor(readonly view: View) {
    this.parties = new Table(view, TABLES.party.prefix);
    this.agents = new Table(view, TABLES.agent.prefix);
    this.trustRoots = new Table(view, TABLES.root.prefix);
    this.accounts = new Table(view, TABLES.account.prefix);
    this.usages = new Table(view, TABLES.usage.prefix);
    this.policies = new Table(view, TABLES.policy.prefix);
    this.transactions = new Table(view, TABLES.transaction.prefix);
    this.obligationTicks = new Table(view, TABLES.obligationTick.prefix);
    this.owed = new Table(view, TABLES.owed.prefix);
  }

  /** tick is the ledger's clock; each Tick operation advances it by one. */
  get tick(): number {
    return (this.view.get(TICK_KEY) as number | undefined) ?? 0;
  }

  set tick(n: number) {
    this.view.put(TICK_KEY, n);
  }

  /** activePolicy is the id of the policy in force, or null before the first activation. */
  get activePolicy(): string | null {
    return (this.view.get(ACTIVE_KEY) as string | undefined) ?? null;
  }

  set activePolicy(id: string) {
    this.view.put(ACTIVE_KEY, id);
  }

  /** The keys of obligations due at `deadline` (breached when the tick passes it), in byte order. */
  dueAt(deadline: number): string[] {
    return this.view.scan(duePrefix(deadline));
  }

  addDue(o: Obligation): void {
    this.view.put(dueKey(o), '');
  }

  removeDue(o: Obligation): void {
    this.view.del(dueKey(o));
  }

  /** The party's obligation of that id, found through the id index; both must be in the view. */
  obligation(party: string, id: string): Obligation | undefined {
    const tick = this.obligationTicks.get(scoped(party, id));
    return tick === undefined ? undefined : this.obligationAt(obligationKey(tick, party, id));
  }

  /** The obligation stored under `key` (see obligationKey); it must be in the view. */
  obligationAt(key: string): Obligation | undefined {
    return this.view.get(key) as Obligation | undefined;
  }

  /** Stores an obligation's state; a new one also enters the id index. */
  putObligation(o: Obligation, isNew: boolean): void {
    this.view.put(obligationKey(o.created_tick, o.party, o.id), o);
    if (isNew) this.obligationTicks.set(scoped(o.party, o.id), o.created_tick);
  }

  /** Records the transaction the intent at log `index` recorded, and where, under its party's id. */
  record(index: number, r: TransactionRecord): void {
    this.view.put(recordedKey(index), r);
    this.transactions.set(scoped(r.party, r.transaction), index);
  }

  /** The transaction recorded at log `index`; it must be in the view. */
  recordedAt(index: number): TransactionRecord | undefined {
    return this.view.get(recordedKey(index)) as TransactionRecord | undefined;
  }

  /** Sets the entry hash of the transaction recorded at log `index`, once its entry is hashed. */
  sealRecorded(index: number, entry_hash: string): void {
    const r = this.recordedAt(index);
    assert(r !== undefined, `a transaction is recorded at ${index}`);
    this.view.put(recordedKey(index), { ...r, entry_hash });
  }
}
