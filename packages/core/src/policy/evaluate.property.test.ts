// Property tests of the normative law over random policy bundles (every operator on
// every left-hand value, ties of priority and of condition counts, obligations with
// repair duties that block) and random sequences of intents and ticks. They prove:
//   1. evaluation is deterministic: the same log gives the same results and states;
//      judging is pure and gives the same judgement twice; and the authored order of
//      rules and keys does not change any verdict, winning rule, basis or obligation;
//   2. `posted` is true exactly when the verdict is Permitted, and a posting moves
//      exactly the intent's legs;
//   3. a refusal changes nothing but the refusal record, and an error before
//      judgement changes nothing at all.
// Each property counts what its sequences reached and fails if a verdict was never
// reached, so that a generator that stopped exercising a path is caught.
import t from 'tap';
import fc from 'fast-check';
import type { Applied } from '../apply.js';
import { canonicalJson } from '../canonical.js';
import type { Operation } from '../ops.js';
import { owedBy } from '../obligations.js';
import type { Account } from '../state.js';
import { TABLES } from '../store.js';
import type { Outcome, Verdict } from '../state.js';
import { AGENT_A, AGENT_B, EVIDENCE, Harness, intent } from '../testing.js';
import { compileBundle } from './bundle.js';
import { judge } from './evaluate.js';

const VERDICTS: Verdict[] = ['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected'];
const ACTIONS = ['purchase.book', 'purchase.book', 'purchase.refund', 'receipt.attach', 'usage.record', 'other.thing'];
const PATTERNS = ['*', 'purchase.*', 'purchase.book', 'purchase.refund', 'receipt.attach', 'usage.*'];

const int = (lo: number, hi: number) => fc.integer({ min: lo, max: hi });
/** An integer right side, written either way the language allows. */
const written = (n: fc.Arbitrary<number>) => n.chain((v) => fc.constantFrom<number | string>(v, String(v)));
const op = <T>(...values: T[]) => fc.constantFrom(...values);

/** A well-formed condition on any value the evaluator reads, with every operator that fits. */
const condition: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({ left: fc.constant('amount'), op: op('eq', 'ne', 'lt', 'lte', 'gt', 'gte'), right: written(int(0, 2500)), currency: op('USD', 'EUR') }),
  fc.record({ left: fc.constant('amount'), op: op('in', 'not_in'), right: fc.array(written(int(0, 2000)), { minLength: 1, maxLength: 3 }), currency: op('USD', 'EUR') }),
  fc.record({ left: fc.constant('currency'), op: op('eq', 'ne'), right: op('USD', 'EUR') }),
  fc.record({ left: op('currency', 'party'), op: op('in', 'not_in'), right: fc.subarray(['USD', 'EUR', 'party_acme', 'party_globex'], { minLength: 1 }) }),
  fc.record({ left: fc.constant('party'), op: op('eq', 'ne', 'prefix'), right: op('party_acme', 'party_globex', 'party_') }),
  fc.record({ left: fc.constant('agent'), op: op('prefix', 'eq'), right: op('agent://acme.example/', AGENT_B) }),
  fc.record({ left: fc.constant('action'), op: op('eq', 'ne', 'prefix'), right: op('purchase.book', 'purchase.', 'usage.record') }),
  fc.record({ left: fc.constant('accounts'), op: op('contains'), right: op('acc_cash_a', 'acc_books_b') }),
  fc.record({ left: fc.constant('accounts'), op: op('in', 'not_in'), right: fc.subarray(['acc_cash_a', 'acc_books_a', 'acc_cash_b'], { minLength: 1 }) }),
  fc.record({ left: op('accounts', 'evidence'), op: op('count_gte', 'count_lte'), right: written(int(0, 3)) }),
  fc.record({ left: fc.constant('evidence'), op: op('contains'), right: fc.constant(EVIDENCE) }),
  fc.record({ left: fc.constant('tick'), op: op('lt', 'lte', 'gt', 'gte', 'eq'), right: written(int(0, 6)) }),
  fc.record({ left: op('usage.consume', 'usage.meter', 'usage.bill'), op: op('gt', 'lte', 'eq'), right: written(int(0, 300)) }),
  fc.record({ left: fc.constant('usage.balance'), op: op('eq', 'ne'), right: op('usage_llm_a', 'usage_llm_b') }),
  fc.record({ left: fc.constant('bindings.merchant'), op: op('eq', 'ne', 'prefix'), right: op('books-r-us', 'test-') }),
  fc.record({ left: fc.constant('bindings.merchant'), op: op('in', 'not_in'), right: fc.subarray<string | number>(['books-r-us', 'test-shop', 42], { minLength: 1 }) }),
  fc.record({ left: fc.constant('bindings.quantity'), op: op('lt', 'gte'), right: written(int(0, 5)) }),
  fc.record({ left: fc.constant('bindings.gift'), op: op('eq', 'ne'), right: fc.boolean() }),
);

const obligation = fc.record({
  id: fc.constant('O-receipt'),
  action: op('receipt.attach', 'receipt.*'),
  deadline_ticks: int(1, 3),
  discharge_when: fc.constantFrom([], [{ left: 'evidence', op: 'count_gte', right: 1 }]),
  repair: fc.constantFrom(
    [],
    [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 2, blocks: ['purchase.*'] }],
    [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 1, blocks: ['purchase.*', 'usage.*'] }, { id: 'D-notify', action: 'notice.send', deadline_ticks: 3 }],
  ),
});

const rule = (id: string) => fc.record({
  modality: fc.oneof({ weight: 2, arbitrary: fc.constant('permission') }, { weight: 1, arbitrary: fc.constant('prohibition') }),
  priority: op(1, 10, 100),
  action: fc.constantFrom(...PATTERNS),
  when: fc.array(condition, { maxLength: 2 }),
  obligations: fc.oneof({ weight: 2, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: obligation.map((o) => [o]) }),
}).map((r) => ({
  id, modality: r.modality, priority: r.priority, match: { action: r.action }, when: r.when,
  ...(r.modality === 'permission' && r.obligations.length > 0 ? { obligations: r.obligations } : {}),
  basis: `rule ${id}`,
}));

/** The purchase permission most bundles carry, so that obligations, breaches and repairs are common. */
const purchase = fc.record({ priority: op(1, 10, 100), o: obligation }).map(({ priority, o }) => ({
  id: 'R-purchase', modality: 'permission', priority, match: { action: 'purchase.*' },
  obligations: [{ ...o, repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 2, blocks: ['purchase.*'] }] }],
  basis: 'Agents may purchase',
}));

const bundle = fc.record({
  ids: fc.uniqueArray(op('R-a', 'R-b', 'R-Z', 'R-1', 'R-x.y', 'R-cap', 'R-usage'), { minLength: 1, maxLength: 5 }),
  purchase: fc.option(purchase, { freq: 5, nil: null }),
}).chain(({ ids, purchase }) => fc.tuple(...ids.map(rule)).map((rules) => ({ rules: purchase ? [...rules, purchase] : rules })));

const legs = (p: string) => fc.array(fc.record({ minor: op(1n, 500n, 1000n, 1001n, 2000n), currency: op('USD', 'USD', 'EUR') }), { maxLength: 2 })
  .map((pairs) => pairs.flatMap(({ minor, currency }) => [
    { account: `acc_cash_${p}`, side: 'Debit', amount: { minor, currency } },
    { account: `acc_books_${p}`, side: 'Credit', amount: { minor, currency } },
  ]));

const intentOp = fc.constantFrom('a', 'a', 'b').chain((p) => fc.record({
  entries: legs(p),
  consume: fc.option(op(100n, 250n), { freq: 3, nil: null }),
  action: fc.constantFrom(...ACTIONS),
  merchant: fc.option(op<string | bigint>('books-r-us', 'test-shop', 42n), { freq: 4, nil: null }),
  quantity: fc.option(op<string | bigint>(3n, '3'), { freq: 2, nil: null }),
  gift: fc.option(fc.boolean(), { freq: 2, nil: null }),
  /**
   * An obligation to name: an id that may exist or not, or a placeholder `@<k>` for
   * the k-th obligation the party then owes (see `resolve`), mostly named from the
   * action that discharges it.
   */
  obligation: fc.oneof(
    { weight: 4, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: int(1, 20).chain((n) => op(`obl_txn_p${n}_O-receipt`, `obl_txn_p${n}_O-receipt/D-refund`)).map((id) => ({ id, fitting: false })) },
    { weight: 3, arbitrary: fc.tuple(int(0, 1), fc.boolean()).map(([k, fitting]) => ({ id: `@${k}`, fitting })) },
  ),
  evidence: fc.boolean(),
  pinned: fc.oneof({ weight: 19, arbitrary: fc.constant('pol_1') }, { weight: 1, arbitrary: fc.constant('pol_0') }),
  /** A small pool of ids: a repeated one is a replay, or another party's conflict. */
  transaction: int(1, 20).map((n) => `txn_p${n}`),
}).map((r) => {
  const bindings: Record<string, unknown> = {};
  if (r.merchant !== null) bindings.merchant = r.merchant;
  if (r.quantity !== null) bindings.quantity = r.quantity;
  if (r.gift !== null) bindings.gift = r.gift;
  if (r.obligation !== null) bindings.obligation = r.obligation.id;
  return intent({
    transaction: r.transaction,
    agent: p === 'a' ? AGENT_A : AGENT_B,
    entries: r.entries,
    ...(r.consume === null ? {} : { consume_usage: { usage: `usage_llm_${p}`, amount: { minor: r.consume, currency: 'USD' } } }),
    action: { action: r.obligation?.fitting ? '@' : r.action, bindings },
    evidence: r.evidence || r.obligation?.fitting ? [EVIDENCE] : [],
    policy: r.pinned,
  });
}));

const ops = fc.array(fc.oneof({ weight: 4, arbitrary: intentOp }, { weight: 1, arbitrary: fc.constant({ type: 'Tick', v: 1 } as Operation) }), { minLength: 5, maxLength: 40 });
const runs = { numRuns: 200 };

/**
 * Replaces the placeholders of an intent against the ledger's state: `@<k>` in the
 * obligation binding becomes the id of the k-th obligation the party owes, repair
 * duties first, and the action `@` becomes the one that discharges it; a party that
 * owes nothing makes a purchase instead, which may create something to owe. Every
 * ledger a property compares is given the same resolved operation.
 */
function resolve(h: Harness, o: Operation): Operation {
  if (o.type !== 'SubmitIntent' || !String(o.action.bindings.obligation ?? '').startsWith('@')) return o;
  // Repair duties first: they are the rarer path, and the only way out of a block.
  const owed = [...owedBy(h.state, h.state.agents.get(o.agent)!)].sort((a, b) => Number(b.repair_of !== null) - Number(a.repair_of !== null));
  const { obligation: _placeholder, ...bindings } = o.action.bindings;
  const named = owed[Number(String(o.action.bindings.obligation).slice(1)) % Math.max(owed.length, 1)];
  if (!named) return { ...o, action: { action: 'purchase.book', bindings } };
  const action = o.action.action === '@' ? named.action.replace(/\*$/, 'attach') : o.action.action;
  return { ...o, action: { action, bindings: { ...bindings, obligation: named.id } } };
}

function ledger(b: unknown): Harness {
  const compiled = compileBundle(b);
  if (!compiled.ok) throw new Error(`the generator made an invalid bundle: ${JSON.stringify(compiled.issues)}`);
  const h = Harness.bootstrap(b, 'pol_0');
  h.activate('pol_1', b);
  return h;
}

function outcomeOf(a: Applied): Outcome | null {
  if (!a.result.ok) return null;
  const v = a.result.value as { kind?: string; outcome?: Outcome };
  return v.kind === 'recorded' ? v.outcome! : null;
}

/** The same bundle as authored by someone else: rules in reverse order, keys in reverse order at every depth. */
function reauthored(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reauthored);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, k === 'rules' ? (v as unknown[]).map(reauthored).reverse() : reauthored(v)]));
}

function debitTotal(h: Harness): bigint {
  let sum = 0n;
  for (const a of h.store.values<Account>(TABLES.account.prefix)) for (const [, tot] of a.totals) sum += tot.debits;
  return sum;
}

/** Asserts that every verdict was reached, and shows what was. */
function reachedEveryVerdict(t: Tap, reached: Map<string, number>): void {
  for (const v of VERDICTS) t.ok((reached.get(v) ?? 0) > 0, `the sequences reached ${v}`);
  t.comment(JSON.stringify(Object.fromEntries([...reached].sort(([a], [b]) => (a < b ? -1 : 1)))));
}
type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

const tally = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

t.test('evaluation is deterministic: same log, same results; judging is pure; authored order is irrelevant', async (t) => {
  const reached = new Map<string, number>();
  fc.assert(fc.property(bundle, ops, (b, seq) => {
    const one = ledger(b);
    const two = ledger(b);
    const other = ledger(reauthored(b));
    for (const generated of seq) {
      const o = resolve(one, generated);
      const [x, y, z] = [one.run(o), two.run(o), other.run(o)];
      if (canonicalJson(x.result) !== canonicalJson(y.result) || x.entry_hash !== y.entry_hash) return false;
      const ox = outcomeOf(x);
      const oz = outcomeOf(z);
      if ((ox === null) !== (oz === null)) return false;
      if (ox && oz) {
        tally(reached, ox.verdict);
        if (ox.provenance.obligations_discharged.some((id) => id.includes('/'))) tally(reached, 'repair discharged');
        else if (ox.provenance.obligations_discharged.length > 0) tally(reached, 'obligation discharged');
        if (ox.provenance.basis?.includes('fail closed')) tally(reached, 'prohibition failed closed');
        if (ox.provenance.prohibitions_checked.length > 1) tally(reached, 'several prohibitions checked');
        const strip = (o: Outcome) => canonicalJson({ ...o, provenance: { ...o.provenance, policy: o.provenance.policy.id } });
        if (strip(ox) !== strip(oz)) return false;
      }
    }
    if (one.stateHash !== two.stateHash) return false;
    const state = one.state;
    const policy = state.policies.get('pol_1')!;
    const before = one.stateHash;
    for (const o of one.log.map((l) => l.op)) {
      if (o.type !== 'SubmitIntent') continue;
      const facts = {
        party: state.agents.get(o.agent)!, agent: o.agent, action: o.action.action, bindings: o.action.bindings,
        entries: o.entries, moves: o, evidence: o.evidence, tick: state.tick,
      };
      if (canonicalJson(judge(state, policy, facts)) !== canonicalJson(judge(state, policy, facts))) return false;
    }
    return one.stateHash === before;
  }), runs);
  t.pass('two ledgers, two judgements and two authorings agreed');
  reachedEveryVerdict(t, reached);
  for (const path of ['obligation discharged', 'repair discharged', 'prohibition failed closed', 'several prohibitions checked']) {
    t.ok((reached.get(path) ?? 0) > 0, `the sequences reached: ${path}`);
  }
});

t.test('posted is true exactly when the verdict is Permitted, and a posting moves exactly its legs', async (t) => {
  const reached = new Map<string, number>();
  fc.assert(fc.property(bundle, ops, (b, seq) => {
    const h = ledger(b);
    for (const generated of seq) {
      const o = resolve(h, generated);
      const before = debitTotal(h);
      const outcome = outcomeOf(h.run(o));
      if (!outcome || o.type !== 'SubmitIntent') continue;
      tally(reached, `${outcome.verdict}/posted=${outcome.posted}`);
      tally(reached, outcome.verdict);
      if (outcome.posted !== (outcome.verdict === 'Permitted')) return false;
      const moved = o.entries.reduce((s, e) => (e.side === 'Debit' ? s + e.amount.minor : s), 0n);
      if (debitTotal(h) - before !== (outcome.posted ? moved : 0n)) return false;
    }
    return true;
  }), runs);
  t.pass('posted iff Permitted held for every recorded outcome');
  reachedEveryVerdict(t, reached);
  t.ok((reached.get('Permitted/posted=true') ?? 0) > 0 && VERDICTS.slice(1).every((v) => (reached.get(`${v}/posted=false`) ?? 0) > 0));
});

t.test('a refusal changes nothing but the refusal record; an error before judgement changes nothing', async (t) => {
  const reached = new Map<string, number>();
  fc.assert(fc.property(bundle, ops, (b, seq) => {
    const h = ledger(b);
    for (const generated of seq) {
      const o = resolve(h, generated);
      const before = h.stateHash;
      const a = h.run(o);
      if (!a.result.ok) {
        tally(reached, a.result.error.error);
        if (h.stateHash !== before) return false;
        continue;
      }
      const outcome = outcomeOf(a);
      if (!outcome) continue;
      tally(reached, outcome.verdict);
      if (outcome.posted) continue;
      const party = h.state.agents.get((o as { agent: string }).agent)!;
      const record = h.txn(outcome.transaction, party);
      if (!record || canonicalJson(record.outcome) !== canonicalJson(outcome)) return false;
      if (h.stateHashWithout(party, outcome.transaction) !== before) return false;
      if (outcome.provenance.obligations_created.length + outcome.provenance.obligations_discharged.length > 0) return false;
    }
    return true;
  }), runs);
  t.pass('refusals recorded themselves and nothing else');
  reachedEveryVerdict(t, reached);
  t.ok((reached.get('policy_pin_mismatch') ?? 0) > 0, 'and an error before judgement');
});
