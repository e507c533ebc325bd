/**
 * A harness for tests of the state machine and of what is built on it: a ledger
 * bootstrapped with a trust root, two parties with bound agents, accounts, usage
 * balances and an active policy, and builders for intents. Operations go through
 * the same validation as operations read back from the log.
 */
import type { Applied } from './apply.js';
import { MemoryStore } from './memory-store.js';
import { parseOperation, type Operation, type Principal } from './ops.js';
import { recordedKey, scoped, type State, type TransactionRecord } from './state.js';
import { hashFromHex, hashHex, recordHash, subHash, TABLES } from './store.js';

export const ISSUER = 'acme-agents';
/** A syntactically valid k4 key and id; the core never verifies signatures. */
export const PUBLIC_KEY = `k4.public.${'A'.repeat(43)}`;
export const KEY_ID = `k4.pid.${'B'.repeat(44)}`;
export const AGENT_A = 'agent://acme.example/agent/buyer-7';
export const AGENT_B = 'agent://globex.example/agent/ops-1';
export const PARTY_A = 'party_acme';
export const PARTY_B = 'party_globex';
export const ZERO_HASH = '0'.repeat(64);
export const EVIDENCE = '3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b';

export const OPERATOR: Principal = { name: 'ops', roles: ['operator'] };
export const AUTHOR: Principal = { name: 'alice', roles: ['author'] };
export const REVIEWER: Principal = { name: 'bob', roles: ['reviewer'] };
export const APPROVER: Principal = { name: 'carol', roles: ['approver'] };

/** A bundle that permits every action, with no conditions and no obligations. */
export const PERMIT_ALL = { rules: [{ id: 'R-all', modality: 'permission', priority: 100, match: { action: '*' }, basis: 'Everything is permitted' }] };

export class Harness {
  readonly store = new MemoryStore();
  /** log is every operation applied, with its index, for replays. */
  readonly log: { index: number; op: Operation }[] = [];
  private index = 0;

  /** Validates and applies one operation at the next log index. Throws on an invalid one. */
  run(op: unknown): Applied {
    const parsed = parseOperation(op);
    if (!parsed.ok) throw new Error(`invalid operation: ${JSON.stringify(parsed.issues)}`);
    this.log.push({ index: ++this.index, op: parsed.value });
    return this.store.apply(this.index, parsed.value);
  }

  /** The state now, every record readable. */
  get state(): State {
    return this.store.read();
  }

  /** The ledger digest: the head of the hash chain. */
  get head(): string {
    return this.store.meta.head;
  }

  get stateHash(): string {
    return this.store.meta.stateHash;
  }

  /** The last `limit` recorded intents, oldest first: what a dry run of that size judges. */
  recorded(limit: number): TransactionRecord[] {
    if (limit <= 0) return [];
    const keys = this.store.keysUnder(TABLES.recorded.prefix);
    return keys.slice(Math.max(0, keys.length - limit)).map((k) => this.store.slot(k)!.value as TransactionRecord);
  }

  /** A recorded transaction of a party (party A's by default). */
  txn(id: string, party: string = PARTY_A): TransactionRecord | undefined {
    const at = this.state.transactions.get(scoped(party, id));
    return at === undefined ? undefined : this.state.recordedAt(at);
  }

  /** The state hash without a party's recorded transaction: what it was before a refusal recorded only that. */
  stateHashWithout(party: string, id: string): string {
    const key = recordedKey(this.state.transactions.get(scoped(party, id))!);
    return hashHex(subHash(hashFromHex(this.stateHash), recordHash(key, this.store.text(key)!)));
  }

  /** Runs an operation that must succeed and returns its value. */
  ok(op: unknown): unknown {
    const a = this.run(op);
    if (!a.result.ok) throw new Error(`operation refused: ${a.result.error.error}: ${a.result.error.message}`);
    return a.result.value;
  }

  admin(type: string, fields: Record<string, unknown>, by: Principal = OPERATOR): Applied {
    return this.run({ type, v: 1, by, ...fields });
  }

  tick(n = 1): Applied[] {
    return Array.from({ length: n }, () => this.run({ type: 'Tick', v: 1 }));
  }

  /** Drafts, reviews, approves and activates a policy with four distinct principals. */
  activate(id: string, bundle: unknown): void {
    for (const [type, by] of [['DraftPolicy', AUTHOR], ['ReviewPolicy', REVIEWER], ['ApprovePolicy', APPROVER], ['ActivatePolicy', APPROVER]] as const) {
      const a = this.admin(type, type === 'DraftPolicy' ? { id, bundle } : { id }, by);
      if (!a.result.ok) throw new Error(`${type} ${id}: ${a.result.error.message}`);
    }
  }

  /** Trust root, parties A and B with agents, cash and house accounts, usage balances. */
  static bootstrap(bundle: unknown = PERMIT_ALL, policy = 'pol_1'): Harness {
    const h = new Harness();
    h.ok({ type: 'AddTrustRoot', v: 1, by: OPERATOR, issuer: ISSUER, public_key: PUBLIC_KEY, key_id: KEY_ID });
    for (const [party, agent, suffix] of [[PARTY_A, AGENT_A, 'a'], [PARTY_B, AGENT_B, 'b']] as const) {
      h.ok({ type: 'AddParty', v: 1, by: OPERATOR, id: party });
      h.ok({ type: 'BindAgent', v: 1, by: OPERATOR, agent, party });
      h.ok({ type: 'OpenAccount', v: 1, by: OPERATOR, id: `acc_cash_${suffix}`, party });
      h.ok({ type: 'OpenAccount', v: 1, by: OPERATOR, id: `acc_books_${suffix}`, party });
      h.ok({ type: 'OpenUsage', v: 1, by: OPERATOR, id: `usage_llm_${suffix}`, currency: 'USD', owner: party });
    }
    h.ok({ type: 'OpenAccount', v: 1, by: OPERATOR, id: 'acc_house' });
    h.ok({ type: 'OpenUsage', v: 1, by: OPERATOR, id: 'usage_unowned', currency: 'USD' });
    h.activate(policy, bundle);
    return h;
  }
}

let counter = 0;

/** An intent of agent A paying `minor` USD from its cash to its books, with overrides. */
export function intent(over: Record<string, unknown> = {}): Operation {
  const minor = (over.minor as bigint | undefined) ?? 100n;
  const rest = { ...over };
  delete rest.minor;
  return {
    type: 'SubmitIntent',
    v: 1,
    transaction: `txn_t${++counter}`,
    agent: AGENT_A,
    entries: [
      { account: 'acc_cash_a', side: 'Debit', amount: { minor, currency: 'USD' } },
      { account: 'acc_books_a', side: 'Credit', amount: { minor, currency: 'USD' } },
    ],
    action: { action: 'purchase.book', bindings: {} },
    evidence: [],
    justification_hash: 'f'.repeat(64),
    policy: 'pol_1',
    authority: { issuer: ISSUER, key_id: KEY_ID, token_id: 'tok-1', capabilities: ['*'] },
    ...rest,
  } as Operation;
}

/** The signed-off verdict of an applied intent, or its error code. */
export function verdictOf(a: Applied): string {
  if (!a.result.ok) return a.result.error.error;
  const v = a.result.value as { kind?: string; outcome?: { verdict: string } };
  return v.kind === 'replayed' ? 'replayed' : v.outcome!.verdict;
}
