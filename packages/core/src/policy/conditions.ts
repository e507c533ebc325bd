/**
 * Conditions: what a rule reads from an intent, and how it compares. A value the
 * evaluator cannot read (a missing binding, a currency when legs use several, a
 * type that does not fit the operator) makes the condition unevaluable; the caller
 * decides what that means (prohibitions fail closed, permissions fail open to deny).
 */
import type { BindingValue, Entry } from '../schema.js';
import type { UsageMoves } from '../usage.js';
import type { CompiledCondition, Operand } from './bundle.js';

/** Everything a condition can read about an intent at its commit point. */
export interface Facts {
  party: string;
  agent: string;
  action: string;
  bindings: Record<string, BindingValue>;
  entries: readonly Entry[];
  moves: UsageMoves;
  evidence: readonly string[];
  tick: number;
}

type Value = bigint | string | boolean | string[];

/** The outcome of a condition: true, false, or null when it cannot be evaluated. */
export interface Evaluation {
  holds: boolean | null;
  /** actual is the value read, as text for a basis; null when it could not be read. */
  actual: string | null;
  /** count is the number of items of a list value. */
  count: number;
}

export function read(c: CompiledCondition, f: Facts): Value | null {
  switch (c.left) {
    case 'amount':
      return f.entries.reduce((sum, e) => (e.side === 'Debit' && e.amount.currency === c.currency ? sum + e.amount.minor : sum), 0n);
    case 'currency': {
      const set = new Set(f.entries.map((e) => e.amount.currency));
      return set.size === 1 ? [...set][0]! : null;
    }
    case 'accounts':
      return [...new Set(f.entries.map((e) => e.account))].sort();
    case 'evidence':
      return [...f.evidence];
    case 'party':
      return f.party;
    case 'agent':
      return f.agent;
    case 'action':
      return f.action;
    case 'tick':
      return BigInt(f.tick);
    case 'usage.consume':
      return f.moves.consume_usage?.amount.minor ?? 0n;
    case 'usage.meter':
      return f.moves.meter_usage?.amount.minor ?? 0n;
    case 'usage.bill':
      return f.moves.bill_usage?.amount.minor ?? 0n;
    case 'usage.balance': {
      const ids = new Set([f.moves.consume_usage, f.moves.meter_usage, f.moves.bill_usage].filter((m) => m).map((m) => m!.usage));
      return ids.size === 1 ? [...ids][0]! : null;
    }
    default: {
      const key = c.left.slice('bindings.'.length);
      return Object.hasOwn(f.bindings, key) ? f.bindings[key]! : null;
    }
  }
}

export function evaluate(c: CompiledCondition, f: Facts): Evaluation {
  const v = read(c, f);
  if (v === null) return { holds: null, actual: null, count: 0 };
  return { holds: compare(c, v), actual: show(v), count: Array.isArray(v) ? v.length : 0 };
}

function sameType(a: Value, b: Operand): boolean {
  return typeof a === typeof b;
}

function compare(c: CompiledCondition, v: Value): boolean | null {
  const r = c.right;
  if (Array.isArray(v)) return compareList(c, v);
  switch (c.op) {
    case 'eq':
    case 'ne': {
      const rv = r as Operand;
      if (!sameType(v, rv)) return null;
      return (v === rv) === (c.op === 'eq');
    }
    case 'lt':
    case 'lte':
    case 'gt':
    case 'gte': {
      if (typeof v !== 'bigint') return null;
      const rv = r as bigint;
      if (c.op === 'lt') return v < rv;
      if (c.op === 'lte') return v <= rv;
      if (c.op === 'gt') return v > rv;
      return v >= rv;
    }
    case 'in':
    case 'not_in': {
      // As for eq: a value of a type none of the items has cannot be compared.
      const comparable = (r as Operand[]).filter((x) => sameType(v, x));
      if (comparable.length === 0) return null;
      return comparable.includes(v as Operand) === (c.op === 'in');
    }
    case 'prefix':
      return typeof v === 'string' ? v.startsWith(r as string) : null;
    default:
      return null;
  }
}

function compareList(c: CompiledCondition, v: string[]): boolean | null {
  switch (c.op) {
    case 'contains':
      return v.includes(c.right as string);
    case 'count_gte':
      return BigInt(v.length) >= (c.right as bigint);
    case 'count_lte':
      return BigInt(v.length) <= (c.right as bigint);
    case 'in':
      return v.every((x) => (c.right as Operand[]).includes(x));
    case 'not_in':
      return !v.some((x) => (c.right as Operand[]).includes(x));
    default:
      return null;
  }
}

function show(v: Value): string {
  if (Array.isArray(v)) return `[${v.join(', ')}]`;
  return typeof v === 'string' ? `"${v}"` : String(v);
}

function items(n: number): string {
  return n === 1 ? '1 item' : `${n} items`;
}

function showRight(r: Operand | Operand[]): string {
  return Array.isArray(r) ? `[${r.map((x) => (typeof x === 'string' ? `"${x}"` : String(x))).join(', ')}]` : typeof r === 'string' ? `"${r}"` : String(r);
}

const OP_WORDS: Record<string, string> = {
  eq: 'equals', ne: 'differs from', lt: 'is below', lte: 'is at most', gt: 'exceeds', gte: 'is at least',
  in: 'is one of', not_in: 'is none of', prefix: 'starts with', contains: 'contains',
};

/** Words for a condition that held, with the real figures. */
export function describeHeld(c: CompiledCondition, e: Evaluation, action: string): string {
  if (e.holds === null) return `${c.left} could not be evaluated, so the rule applies (fail closed)`;
  if (c.left === 'amount') {
    const noun = action.split('.')[0]!;
    const subject = `${noun.charAt(0).toUpperCase()}${noun.slice(1)} of ${e.actual} ${c.currency} minor units`;
    if (c.op === 'gt') return `${subject} exceeds the ${c.right} limit`;
    if (c.op === 'gte') return `${subject} reaches the ${c.right} limit`;
    return `${subject} ${OP_WORDS[c.op]} ${showRight(c.right)}`;
  }
  if (c.op === 'count_gte' || c.op === 'count_lte') return `${c.left} has ${items(e.count)}, ${c.op === 'count_gte' ? 'at least' : 'at most'} ${c.right}`;
  return `${c.left} ${e.actual} ${OP_WORDS[c.op]} ${showRight(c.right)}`;
}

/** Words for a condition that did not hold. */
export function describeFailed(c: CompiledCondition, e: Evaluation): string {
  const left = c.left === 'amount' ? `amount in ${c.currency}` : c.left;
  if (e.holds === null) return `${left} could not be evaluated`;
  if (c.op === 'count_gte' || c.op === 'count_lte') return `${left} has ${items(e.count)}, not ${c.op === 'count_gte' ? 'at least' : 'at most'} ${c.right}`;
  return `${left} ${e.actual} does not satisfy ${c.op} ${showRight(c.right)}`;
}
