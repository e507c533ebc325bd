/**
 * Snapshots: the ledger as canonical bytes, and back. A snapshot restored and run
 * on gives the same states and digests as running the whole log straight through.
 *
 * The state hash is the SHA-256 of the canonical form of the state alone (not of
 * the log position or chain head): an operation that records nothing leaves it
 * unchanged. Derived structures (compiled policies, the owed-obligations index) are
 * not stored; they are rebuilt from what is.
 */
import { z } from 'zod';
import type { Ledger } from './apply.js';
import { canonicalHash, canonicalJson } from './canonical.js';
import { assert } from './errors.js';
import { parseJson } from './json.js';
import { reindexObligations } from './obligations.js';
import { compileBundle, OPERATORS } from './policy/bundle.js';
import { parseWith } from './parse.js';
import { Action, Entry, UsageMove } from './schema.js';
import { emptyState, type Obligation, type Policy, type State, type TransactionRecord } from './state.js';

/** The state as plain JSON-able data, Maps as arrays in insertion order. */
export function stateData(s: State) {
  return {
    tick: s.tick,
    parties: [...s.parties.keys()],
    agents: [...s.agents],
    trust_roots: [...s.trustRoots.values()],
    accounts: [...s.accounts.values()].map((a) => ({
      id: a.id,
      party: a.party,
      totals: [...a.totals].map(([currency, t]) => [currency, t.debits, t.credits] as const),
    })),
    usages: [...s.usages.values()],
    transactions: [...s.transactions.values()],
    policies: [...s.policies.values()].map(({ compiled: _derived, ...p }) => p),
    active_policy: s.activePolicy,
    obligations: [...s.obligations.values()],
  };
}

export function stateHash(s: State): string {
  return canonicalHash(stateData(s));
}

export function encodeSnapshot(l: Ledger): Uint8Array {
  return Buffer.from(canonicalJson({ v: 1, applied: l.applied, head: l.head, state: stateData(l.state) }), 'utf8');
}

const int = z.union([z.number(), z.bigint()]).transform((v) => Number(v)).pipe(z.number().int().min(0));
const big = z.union([z.number(), z.bigint()]).transform((v) => BigInt(v));
const str = z.string();
const nullable = <T extends z.ZodType>(t: T) => t.nullable();
const operand = z.union([z.string(), z.boolean(), big]);
const condition = z.object({
  left: str,
  kind: z.enum(['number', 'string', 'list', 'dynamic']),
  op: z.enum(OPERATORS),
  right: z.union([operand, z.array(operand)]),
  currency: nullable(str),
});
const repair = z.object({ id: str, action: str, deadline_ticks: int, blocks: z.array(str), discharge_when: z.array(condition) });
const pending = z.object({
  id: str, rule: str, action: str, deadline_tick: int, state: z.enum(['open', 'discharged', 'breached']), repair_of: str.optional(),
});
const outcome = z.object({
  transaction: str,
  verdict: z.enum(['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected']),
  posted: z.boolean(),
  policy: str,
  obligations_pending: z.array(pending),
  justification_hash: str,
  provenance: z.object({
    tick: int,
    log_index: int,
    authority: z.object({ issuer: str, token_id: str, capability: str }),
    prohibitions_checked: z.array(str),
    winning_rule: str,
    basis: str.optional(),
    obligations_discharged: z.array(str),
    obligations_created: z.array(str),
    policy: z.object({ id: str, bundle_hash: str }),
  }),
});
const SnapshotSchema = z.object({
  v: z.literal(1),
  applied: int,
  head: z.string().regex(/^[0-9a-f]{64}$/),
  state: z.object({
    tick: int,
    parties: z.array(str),
    agents: z.array(z.tuple([str, str])),
    trust_roots: z.array(z.object({ issuer: str, public_key: str, key_id: str })),
    accounts: z.array(z.object({ id: str, party: nullable(str), totals: z.array(z.tuple([str, big, big])) })),
    usages: z.array(z.object({ id: str, currency: str, owner: nullable(str), consumed: big, metered: big, billed: big })),
    transactions: z.array(z.object({
      transaction: str, agent: str, party: str, action: Action, entries: z.array(Entry),
      consume_usage: UsageMove.optional(), meter_usage: UsageMove.optional(), bill_usage: UsageMove.optional(),
      evidence: z.array(str), outcome, entry_hash: str,
    })),
    policies: z.array(z.object({
      id: str, bundle: z.unknown(), bundle_hash: str,
      state: z.enum(['draft', 'reviewed', 'approved', 'active', 'superseded']),
      author: str, reviewer: nullable(str), approver: nullable(str),
      activated_at_tick: nullable(int), superseded_at_tick: nullable(int),
      history: z.array(z.object({
        action: z.enum(['draft', 'review', 'approve', 'activate', 'supersede']), by: str, tick: int, log_index: int, comment: str.optional(),
      })),
    })),
    active_policy: nullable(str),
    obligations: z.array(z.object({
      id: str, party: str, rule: str, policy: z.object({ id: str, bundle_hash: str }), action: str, transaction: str,
      created_tick: int, deadline_tick: int, state: z.enum(['open', 'discharged', 'breached']), repair_of: nullable(str),
      blocks: z.array(str), discharge_when: z.array(condition), repair: z.array(repair),
      discharged_by: nullable(str), discharged_at_tick: nullable(int), breached_at_tick: nullable(int),
    })),
  }),
});

/** Restores a ledger from snapshot bytes. Throws on bytes that are not a snapshot. */
export function decodeSnapshot(bytes: Uint8Array): Ledger {
  const parsed = parseWith(SnapshotSchema, parseJson(Buffer.from(bytes).toString('utf8')));
  if (!parsed.ok) throw new Error(`not a ledger snapshot: ${parsed.issues.map((i) => `${i.path} ${i.message}`).join('; ')}`);
  const d = parsed.value.state;
  const s = emptyState();
  s.tick = d.tick;
  for (const id of d.parties) s.parties.set(id, { id });
  for (const [agent, party] of d.agents) s.agents.set(agent, party);
  for (const t of d.trust_roots) s.trustRoots.set(t.issuer, t);
  for (const a of d.accounts) {
    s.accounts.set(a.id, { id: a.id, party: a.party, totals: new Map(a.totals.map(([c, debits, credits]) => [c, { debits, credits }])) });
  }
  for (const u of d.usages) s.usages.set(u.id, u);
  for (const t of d.transactions) s.transactions.set(t.transaction, t as TransactionRecord);
  for (const p of d.policies) {
    const compiled = compileBundle(p.bundle);
    assert(compiled.ok, `the recorded bundle of policy ${p.id} compiles`);
    s.policies.set(p.id, { ...p, compiled: compiled.bundle } as Policy);
  }
  s.activePolicy = d.active_policy;
  for (const o of d.obligations) s.obligations.set(o.id, o as Obligation);
  reindexObligations(s);
  return { state: s, applied: parsed.value.applied, head: parsed.value.head };
}
