/**
 * How each table's records are stored: the canonical JSON of the record (a policy
 * without its compiled form, which is derived), and back through a schema, so that
 * every `bigint` field comes back a `bigint` and a record the ledger did not write is
 * refused rather than trusted. Decoding a policy compiles its bundle again.
 */
import { z } from 'zod';
import { canonicalJson } from './canonical.js';
import { assert } from './errors.js';
import { parseJson } from './json.js';
import { compileBundle, OPERATORS } from './policy/bundle.js';
import { parseWith } from './parse.js';
import { Action, Entry, UsageMove } from './schema.js';
import { TABLES } from './store.js';

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
const obligationState = z.enum(['open', 'discharged', 'breached']);
const pending = z.object({ id: str, rule: str, action: str, deadline_tick: int, state: obligationState, repair_of: str.optional() });
const policyRef = z.object({ id: str, bundle_hash: str });
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
    policy: policyRef,
  }),
});

const policy = z.object({
  id: str, bundle: z.unknown(), bundle_hash: str,
  state: z.enum(['draft', 'reviewed', 'approved', 'active', 'superseded']),
  author: str, reviewer: nullable(str), approver: nullable(str),
  activated_at_tick: nullable(int), superseded_at_tick: nullable(int),
  history: z.array(z.object({
    action: z.enum(['draft', 'review', 'approve', 'activate', 'supersede']), by: str, tick: int, log_index: int, comment: str.optional(),
  })),
}).transform((p) => {
  const compiled = compileBundle(p.bundle);
  assert(compiled.ok, `the recorded bundle of policy ${p.id} compiles`);
  return { ...p, compiled: compiled.bundle };
});

/** The schema of each table's records. */
const SCHEMAS: Record<keyof typeof TABLES, z.ZodType> = {
  meta: z.union([int, z.string()]),
  party: z.object({ id: str }),
  agent: str,
  root: z.object({ issuer: str, public_key: str, key_id: str }),
  account: z.object({ id: str, party: nullable(str), totals: z.array(z.tuple([str, z.object({ debits: big, credits: big })])) }),
  usage: z.object({ id: str, currency: str, owner: nullable(str), consumed: big, metered: big, billed: big }),
  policy,
  recorded: z.object({
    transaction: str, agent: str, party: str, action: Action, entries: z.array(Entry),
    consume_usage: UsageMove.optional(), meter_usage: UsageMove.optional(), bill_usage: UsageMove.optional(),
    evidence: z.array(str), outcome, entry_hash: str,
  }),
  obligation: z.object({
    id: str, party: str, rule: str, policy: policyRef, action: str, transaction: str,
    created_tick: int, deadline_tick: int, state: obligationState, repair_of: nullable(str),
    blocks: z.array(str), discharge_when: z.array(condition), repair: z.array(repair),
    discharged_by: nullable(str), discharged_at_tick: nullable(int), breached_at_tick: nullable(int),
  }),
  owed: z.array(z.object({ id: str, rule: str, action: str, deadline_tick: int, state: obligationState, repair_of: nullable(str), blocks: z.array(str), repairs: int.optional() })),
  obligationTick: int,
  due: z.literal(''),
  transaction: int,
};

const BY_PREFIX = Object.entries(TABLES).map(([name, t]) => [t.prefix, SCHEMAS[name as keyof typeof TABLES]] as const);

function schemaOf(key: string): z.ZodType {
  const found = BY_PREFIX.find(([prefix]) => key.startsWith(prefix));
  assert(found !== undefined, `${key} belongs to a table`);
  return found[1];
}

/** The stored text of a record: its canonical JSON, without derived parts. */
export function encodeRecord(key: string, value: unknown): string {
  if (key.startsWith(TABLES.policy.prefix)) {
    const { compiled: _derived, ...stored } = value as { compiled: unknown };
    return canonicalJson(stored);
  }
  return canonicalJson(value);
}

/** A record read back from its stored text. Throws on text the ledger could not have written. */
export function decodeRecord(key: string, text: string): unknown {
  const parsed = parseWith(schemaOf(key), parseJson(text));
  if (!parsed.ok) throw new Error(`the stored record ${key} is not valid: ${parsed.issues.map((i) => `${i.path} ${i.message}`).join('; ')}`);
  return parsed.value;
}
