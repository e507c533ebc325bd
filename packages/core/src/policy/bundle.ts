/**
 * The policy language: a bundle of rules, checked when it is drafted so that a
 * mistake is a clear error at authoring time and never a surprise at commit time.
 *
 * A bundle is identified by its content hash, the SHA-256 of its RFC 8785 canonical
 * form as authored. `compileBundle` turns an authored bundle into the form the
 * evaluator reads; it is deterministic, so every replica compiles the same rules.
 */
import { z } from 'zod';
import { canonicalHash } from '../canonical.js';
import { AccountId, ActionName, ActionPattern, AgentUri, Currency, PartyId, UsageId, intIn } from '../schema.js';
import { stringifyJson } from '../json.js';
import { parseWith } from '../parse.js';

export const OPERATORS = ['eq', 'ne', 'lt', 'lte', 'gt', 'gte', 'in', 'not_in', 'prefix', 'contains', 'count_gte', 'count_lte'] as const;
export type Operator = (typeof OPERATORS)[number];

/** Rule ids the evaluator itself answers with; a bundle may not define them. */
export const DEFAULT_DENY = 'default-deny';
export const UNKNOWN_OBLIGATION = 'unknown-obligation';
const RESERVED_RULE_IDS = new Set([DEFAULT_DENY, UNKNOWN_OBLIGATION]);

export const RULES_COUNT_MAX = 256;
export const CONDITIONS_COUNT_MAX = 32;
export const DEADLINE_TICKS_MAX = 1_000_000_000;

const Scalar = z.union([z.string().max(256, 'must be at most 256 characters'), z.number(), z.bigint(), z.boolean()], {
  error: 'must be a string, an integer or a boolean',
});
const RuleId = z.string().regex(/^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/, 'must be a rule id (a letter, then letters, digits or _ . : -)');
/**
 * Obligation and repair-duty ids have no `_` and no `/`: an obligation's id is
 * `obl_<transaction>_<obligation>` and a repair duty's `<obligation id>/<repair>`,
 * and these forms must name one duty each.
 */
const DutyId = z.string().regex(/^[A-Za-z][A-Za-z0-9.:-]{0,63}$/, 'must be an obligation id (a letter, then letters, digits or . : -; no _)');

/**
 * A value as JSON, for a message: the commit point builds these messages, so this never
 * throws, whatever was parsed (JSON.stringify throws on an integer beyond 2^53, which
 * the parser reads as a bigint, and that failure halted every replica at the entry).
 */
function shown(value: unknown): string {
  try {
    return stringifyJson(value);
  } catch {
    return typeof value;
  }
}

/** What is wrong with a right side of no allowed shape, said of that side as a whole. */
function rightShape(input: unknown): string {
  if (!Array.isArray(input)) return 'must be a string (at most 256 characters), an integer, a boolean, or a list of them';
  if (input.length === 0) return 'must list at least one value';
  if (input.length > 256) return `must list at most 256 values, not ${input.length}`;
  return 'must list strings (at most 256 characters), integers or booleans';
}

const Condition = z.strictObject({
  left: z.string().max(80, 'must be at most 80 characters'),
  op: z.enum(OPERATORS, { error: (iss) => `${shown(iss.input)} is not an operator (one of ${OPERATORS.join(', ')})` }),
  right: z.union([Scalar, z.array(Scalar).min(1, 'must list at least one value').max(256, 'must list at most 256 values')], { error: (iss) => rightShape(iss.input) }).optional(),
  currency: Currency.optional(),
});

const Repair = z.strictObject({
  id: DutyId,
  action: ActionPattern,
  deadline_ticks: intIn(1, DEADLINE_TICKS_MAX, `a number of ticks from 1 to ${DEADLINE_TICKS_MAX}`),
  blocks: z.array(ActionPattern).max(16, 'must list at most 16 action patterns').optional(),
  discharge_when: z.array(Condition).max(CONDITIONS_COUNT_MAX, `must hold at most ${CONDITIONS_COUNT_MAX} conditions`).optional(),
});

const ObligationDef = z.strictObject({
  id: DutyId,
  action: ActionPattern,
  deadline_ticks: intIn(1, DEADLINE_TICKS_MAX, `a number of ticks from 1 to ${DEADLINE_TICKS_MAX}`),
  discharge_when: z.array(Condition).max(CONDITIONS_COUNT_MAX, `must hold at most ${CONDITIONS_COUNT_MAX} conditions`).optional(),
  repair: z.array(Repair).max(8, 'must hold at most 8 repair duties').optional(),
});

const Rule = z.strictObject({
  id: RuleId,
  modality: z.enum(['permission', 'prohibition'], { error: 'must be permission or prohibition' }),
  priority: intIn(0, 1_000_000, 'an integer from 0 to 1000000 (lower wins)'),
  match: z.strictObject({ action: ActionPattern }),
  when: z.array(Condition).max(CONDITIONS_COUNT_MAX, `must hold at most ${CONDITIONS_COUNT_MAX} conditions`).optional(),
  obligations: z.array(ObligationDef).max(16, 'must hold at most 16 obligations').optional(),
  single_currency: z.boolean().optional(),
  basis: z.string().min(1, 'must not be empty').max(1024, 'must be at most 1024 characters'),
});

export const BundleSchema = z.strictObject({
  description: z.string().max(4096, 'must be at most 4096 characters').optional(),
  rules: z.array(Rule).min(1, 'must hold at least one rule').max(RULES_COUNT_MAX, `must hold at most ${RULES_COUNT_MAX} rules`),
});
type AuthoredBundle = z.output<typeof BundleSchema>;
type AuthoredCondition = z.output<typeof Condition>;

/** What a condition's left side reads, and so which operators and right sides fit it. */
export type LeftKind = 'number' | 'string' | 'list' | 'dynamic';

const LEFT_KINDS: Record<string, LeftKind> = {
  amount: 'number',
  tick: 'number',
  'usage.consume': 'number',
  'usage.meter': 'number',
  'usage.bill': 'number',
  currency: 'string',
  party: 'string',
  agent: 'string',
  action: 'string',
  'usage.balance': 'string',
  accounts: 'list',
  evidence: 'list',
};

const OPS_BY_KIND: Record<LeftKind, readonly Operator[]> = {
  number: ['eq', 'ne', 'lt', 'lte', 'gt', 'gte', 'in', 'not_in'],
  string: ['eq', 'ne', 'in', 'not_in', 'prefix'],
  list: ['contains', 'in', 'not_in', 'count_gte', 'count_lte'],
  dynamic: ['eq', 'ne', 'lt', 'lte', 'gt', 'gte', 'in', 'not_in', 'prefix'],
};

export function leftKind(left: string): LeftKind | null {
  if (/^bindings\.[a-z][a-z0-9_]{0,63}$/.test(left)) return 'dynamic';
  // An own-property check: "constructor" or "toString" must not find Object's members.
  return Object.hasOwn(LEFT_KINDS, left) ? LEFT_KINDS[left]! : null;
}

/** A right side normalized for evaluation: integers as `bigint`. */
export type Operand = string | bigint | boolean;
export interface CompiledCondition {
  left: string;
  kind: LeftKind;
  op: Operator;
  right: Operand | Operand[];
  currency: string | null;
}
export interface CompiledRepair {
  id: string;
  action: string;
  deadline_ticks: number;
  blocks: string[];
  discharge_when: CompiledCondition[];
}
export interface CompiledObligation {
  id: string;
  action: string;
  deadline_ticks: number;
  discharge_when: CompiledCondition[];
  repair: CompiledRepair[];
}
export interface CompiledRule {
  id: string;
  modality: 'permission' | 'prohibition';
  priority: number;
  action: string;
  when: CompiledCondition[];
  obligations: CompiledObligation[];
  single_currency: boolean;
  basis: string;
}
export interface CompiledBundle {
  /** Rules in the order they win: lowest priority, then most conditions, then smaller id by bytes. */
  rules: CompiledRule[];
}

export type BundleIssue = { path: string; message: string };

/** The content hash of an authored bundle. */
export function bundleHash(bundle: unknown): string {
  return canonicalHash(bundle);
}

/** Checks and compiles an authored bundle. Every problem names its rule and field. */
export function compileBundle(input: unknown): { ok: true; bundle: CompiledBundle } | { ok: false; issues: BundleIssue[] } {
  const parsed = parseWith(BundleSchema, input);
  const issues: BundleIssue[] = parsed.ok ? [] : parsed.issues.map((i) => nameSchemaIssue(i, input));
  const seen = new Set<string>();
  const rules = parsed.ok ? parsed.value.rules : valueAt(input, 'rules');
  (Array.isArray(rules) ? rules : []).forEach((authored: unknown, i) => {
    const at = (field: string, message: string) => {
      const path = `rules.${i}${field ? `.${field}` : ''}`;
      issues.push({ path, message: `${subject(input, path)}: ${message}` });
    };
    const rule = Rule.safeParse(authored);
    if (rule.success) {
      checkRule(rule.data, seen, at);
      return;
    }
    // A rule of the wrong shape still has its conditions checked, where they have the
    // right shape themselves: the draft lists every problem, not the first kind.
    const when = valueAt(authored, 'when');
    if (Array.isArray(when)) {
      when.forEach((c: unknown, j) => {
        const condition = Condition.safeParse(c);
        if (condition.success) checkCondition(condition.data, `when.${j}`, at);
      });
    }
  });
  if (!parsed.ok || issues.length > 0) return { ok: false, issues };
  return { ok: true, bundle: { rules: orderRules(parsed.value.rules.map(compileRule)) } };
}

/**
 * What each string the evaluator reads always is, so that a right side of another form
 * is a condition that can never hold (eq, in, contains) or always holds (ne, not_in).
 */
const VALUE_FORMS: Record<string, { form: z.ZodType<string>; what: string }> = {
  currency: { form: Currency, what: 'a currency code (3 to 12 capitals or digits, starting with a capital, as USD)' },
  party: { form: PartyId, what: 'a party id' },
  agent: { form: AgentUri, what: 'an agent URI (agent://<authority>/agent/<agent_id>)' },
  action: { form: ActionName, what: 'an action name (dotted lowercase words, as purchase.book)' },
  'usage.balance': { form: UsageId, what: 'a usage-balance id (usage_<id>)' },
  accounts: { form: AccountId, what: 'an account id (acc_<id>)' },
};
const EXACT_OPS: ReadonlySet<Operator> = new Set(['eq', 'ne', 'in', 'not_in', 'contains']);

/**
 * Every right side no value the evaluator reads can ever equal (`currency eq "usd"`),
 * which the admin plane refuses in a new draft before it proposes it. They are not
 * checked at the commit point, so that a log whose drafts were judged before they were
 * checked replays as it was judged. A bundle that does not parse has none here (its
 * issues are compileBundle's).
 */
export function unmatchableValues(input: unknown): BundleIssue[] {
  const issues: BundleIssue[] = [];
  const parsed = BundleSchema.safeParse(input);
  if (!parsed.success) return issues;
  const check = (conditions: AuthoredCondition[] | undefined, base: string) => (conditions ?? []).forEach((c, j) => {
    // An own key only: `constructor` or `toString` would find Object's.
    const form = Object.hasOwn(VALUE_FORMS, c.left) ? VALUE_FORMS[c.left] : undefined;
    if (form === undefined || !EXACT_OPS.has(c.op)) return;
    const values = Array.isArray(c.right) ? c.right : [c.right];
    values.forEach((v, k) => {
      if (typeof v !== 'string' || form.form.safeParse(v).success) return;
      const path = `${base}.${j}.right${Array.isArray(c.right) ? `.${k}` : ''}`;
      const never = c.left === 'accounts' ? `accounts never holds ${JSON.stringify(v)}: each is` : `${c.left} is never ${JSON.stringify(v)}: it is always`;
      issues.push({ path, message: `${subject(input, path)}: ${never} ${form.what}` });
    });
  });
  parsed.data.rules.forEach((rule, i) => {
    check(rule.when, `rules.${i}.when`);
    (rule.obligations ?? []).forEach((o, j) => {
      check(o.discharge_when, `rules.${i}.obligations.${j}.discharge_when`);
      (o.repair ?? []).forEach((r, k) => check(r.discharge_when, `rules.${i}.obligations.${j}.repair.${k}.discharge_when`));
    });
  });
  return issues;
}

/** The checks of one rule of the right shape beyond its shape: its id, its conditions, its obligations. */
function checkRule(rule: AuthoredBundle['rules'][number], seen: Set<string>, at: At): void {
  if (RESERVED_RULE_IDS.has(rule.id)) at('id', `the id ${rule.id} is reserved`);
  if (seen.has(rule.id)) at('id', `duplicate rule id ${rule.id}`);
  seen.add(rule.id);
  if (rule.modality === 'prohibition' && rule.obligations?.length) at('obligations', 'a prohibition imposes no obligations');
  checkConditions(rule.when ?? [], 'when', at);
  checkObligations(rule.obligations ?? [], at);
}

/**
 * Who an issue at `path` concerns, by the ids as authored: `rule R-x`, then
 * `, obligation O-y` and `, repair duty D-z` when the path goes through them. An
 * element without a usable id is named by its position (`#0`).
 */
function subject(input: unknown, path: string): string | null {
  const m = /^rules\.(\d+)(?:\.obligations\.(\d+)(?:\.repair\.(\d+))?)?/.exec(path);
  if (!m) return null;
  const name = (at: string, k: string) => {
    const id = valueAt(input, `${at}.id`);
    return typeof id === 'string' ? id : `#${k}`;
  };
  const rule = `rules.${m[1]}`;
  let who = `rule ${name(rule, m[1]!)}`;
  if (m[2] === undefined) return who;
  const obligation = `${rule}.obligations.${m[2]}`;
  who += `, obligation ${name(obligation, m[2])}`;
  if (m[3] === undefined) return who;
  return `${who}, repair duty ${name(`${obligation}.repair.${m[3]}`, m[3])}`;
}

/** The authored value at a dotted path, or undefined when there is none. */
function valueAt(input: unknown, path: string): unknown {
  let v = input;
  for (const key of path === '' ? [] : path.split('.')) {
    if (typeof v !== 'object' || v === null || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return v;
}

/** A schema issue in the words of the policy language: who, which field, what is wrong. */
function nameSchemaIssue(issue: BundleIssue, input: unknown): BundleIssue {
  const field = issue.path.split('.').pop() ?? '';
  const named = /^\d*$/.test(field) ? '' : `${field} `;
  // A missing field is reported as such, whatever the field's own schema would say.
  const what = valueAt(input, issue.path) === undefined && named !== '' ? 'is required' : issue.message;
  const who = issue.path === '' ? 'the bundle' : subject(input, issue.path);
  return { path: issue.path, message: who === null ? `${named}${what}` : `${who}: ${named}${what}` };
}

type At = (field: string, message: string) => void;

function checkObligations(obligations: AuthoredBundle['rules'][number]['obligations'] & object, at: At): void {
  const ids = new Set<string>();
  obligations.forEach((o, j) => {
    const base = `obligations.${j}`;
    if (ids.has(o.id)) at(`${base}.id`, `duplicate obligation id ${o.id}`);
    ids.add(o.id);
    checkConditions(o.discharge_when ?? [], `${base}.discharge_when`, at);
    const repairIds = new Set<string>();
    (o.repair ?? []).forEach((r, k) => {
      if (repairIds.has(r.id)) at(`${base}.repair.${k}.id`, `duplicate repair duty id ${r.id}`);
      repairIds.add(r.id);
      checkConditions(r.discharge_when ?? [], `${base}.repair.${k}.discharge_when`, at);
    });
  });
}

function checkConditions(conditions: AuthoredCondition[], base: string, at: At): void {
  conditions.forEach((c, j) => checkCondition(c, `${base}.${j}`, at));
}

function checkCondition(c: AuthoredCondition, where: string, at: At): void {
  const kind = leftKind(c.left);
  if (kind === null) {
    at(`${where}.left`, `the evaluator cannot read "${c.left}" (it reads amount, currency, accounts, evidence, party, agent, action, tick, usage.consume, usage.meter, usage.bill, usage.balance and bindings.<name>)`);
    return;
  }
  if (!OPS_BY_KIND[kind].includes(c.op)) {
    at(`${where}.op`, `operator ${c.op} does not apply to ${c.left} (use ${OPS_BY_KIND[kind].join(', ')})`);
    return;
  }
  if (c.left === 'amount' && c.currency === undefined) at(`${where}.currency`, 'a condition on amount names its currency');
  if (c.left !== 'amount' && c.currency !== undefined) at(`${where}.currency`, `currency applies only to amount, not to ${c.left}`);
  const problem = rightProblem(kind, c.op, c.right);
  if (problem) at(`${where}.right`, `${c.op} on ${c.left} needs ${problem}`);
}

const INTEGER_TEXT = /^-?(0|[1-9][0-9]*)$/;
/** The largest magnitude of an integer right side: 128 bits, either way. */
const INTEGER_MAGNITUDE_MAX = (1n << 128n) - 1n;

/** An integer as JSON or as a string of digits, or null; one of more than 128 bits is `wide`. */
function readInteger(v: unknown): bigint | 'wide' | null {
  let n: bigint | null = null;
  if (typeof v === 'bigint') n = v;
  else if (typeof v === 'number') n = Number.isSafeInteger(v) ? BigInt(v) : null;
  else if (typeof v === 'string' && INTEGER_TEXT.test(v)) {
    if (v.replace('-', '').length > 39) return 'wide'; // 2^128 has 39 digits
    n = BigInt(v);
  }
  if (n === null) return null;
  return n > INTEGER_MAGNITUDE_MAX || n < -INTEGER_MAGNITUDE_MAX ? 'wide' : n;
}

function asInteger(v: unknown): bigint | null {
  const n = readInteger(v);
  return n === 'wide' ? null : n;
}

function rightProblem(kind: LeftKind, op: Operator, right: unknown): string | null {
  if (right === undefined) return 'a right side';
  const list = op === 'in' || op === 'not_in';
  if (list !== Array.isArray(right)) return list ? 'a list as right' : 'a single value as right';
  const items = (Array.isArray(right) ? right : [right]) as unknown[];
  if (items.some((v) => readInteger(v) === 'wide')) return 'an integer of at most 128 bits (2^128-1 either way) as right';
  const allInts = items.every((v) => asInteger(v) !== null);
  const allStrings = items.every((v) => typeof v === 'string');
  if (op === 'count_gte' || op === 'count_lte') return allInts && asInteger(items[0])! >= 0n ? null : 'a count (an integer, 0 or more) as right';
  if (kind === 'number') return allInts ? null : 'an integer (or a string of digits) as right';
  if (kind === 'string' || kind === 'list') return allStrings ? null : 'a string as right';
  if (op === 'lt' || op === 'lte' || op === 'gt' || op === 'gte') return allInts ? null : 'an integer (or a string of digits) as right';
  if (op === 'prefix') return allStrings ? null : 'a string as right';
  // A binding holds an integer, a string or a boolean; a fraction can never equal one.
  const exact = items.every((v) => typeof v !== 'number' || Number.isSafeInteger(v));
  return exact ? null : 'an integer, a string or a boolean as right';
}

function compileCondition(c: AuthoredCondition): CompiledCondition {
  const kind = leftKind(c.left)!;
  const numeric = kind === 'number' || c.op === 'count_gte' || c.op === 'count_lte' || (kind === 'dynamic' && ['lt', 'lte', 'gt', 'gte'].includes(c.op));
  const norm = (v: unknown): Operand => {
    if (numeric) return asInteger(v)!;
    if (typeof v === 'number') return BigInt(v);
    return v as string | bigint | boolean;
  };
  return {
    left: c.left,
    kind,
    op: c.op,
    right: Array.isArray(c.right) ? c.right.map(norm) : norm(c.right),
    currency: c.currency ?? null,
  };
}

function compileRule(r: AuthoredBundle['rules'][number]): CompiledRule {
  return {
    id: r.id,
    modality: r.modality,
    priority: r.priority,
    action: r.match.action,
    when: (r.when ?? []).map(compileCondition),
    obligations: (r.obligations ?? []).map((o) => ({
      id: o.id,
      action: o.action,
      deadline_ticks: o.deadline_ticks,
      discharge_when: (o.discharge_when ?? []).map(compileCondition),
      repair: (o.repair ?? []).map((d) => ({
        id: d.id,
        action: d.action,
        deadline_ticks: d.deadline_ticks,
        blocks: d.blocks ?? [],
        discharge_when: (d.discharge_when ?? []).map(compileCondition),
      })),
    })),
    single_currency: r.single_currency ?? false,
    basis: r.basis,
  };
}

/** The winning order: lowest priority, then the most conditions, then the smaller id by bytes. */
export function compareRules(a: CompiledRule, b: CompiledRule): number {
  if (a.priority !== b.priority) return a.priority - b.priority;
  if (a.when.length !== b.when.length) return b.when.length - a.when.length;
  return compareBytes(a.id, b.id);
}

/**
 * Compares strings by their UTF-8 bytes, the order that does not depend on a locale;
 * -1, 0 or 1, as Buffer.compare answers. Sorting calls it often (a party's obligations
 * on every intent), so it reads code units in place: a UTF-16 code unit that is not a
 * surrogate is its code point, and code points order as their UTF-8 bytes do. At a
 * surrogate, whole or half of a pair, it encodes both strings and compares the bytes,
 * which keeps the answer for a lone one (encoded as U+FFFD) exactly as it was.
 */
export function compareBytes(a: string, b: string): number {
  const n = a.length < b.length ? a.length : b.length;
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if ((x >= 0xd800 && x <= 0xdfff) || (y >= 0xd800 && y <= 0xdfff)) return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
    if (x !== y) return x < y ? -1 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

function orderRules(rules: CompiledRule[]): CompiledRule[] {
  return [...rules].sort(compareRules);
}
