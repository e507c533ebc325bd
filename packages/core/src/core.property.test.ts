// Property tests over random operation sequences (intents of two parties over own,
// foreign and house accounts, usage moves near the 128-bit bounds, ticks, policy
// changes). They prove: conservation and the usage chain are never broken; a refusal
// before judgement changes nothing; a recorded refusal changes nothing but its
// record; errors and replays leave the digest unchanged; replaying the log gives the
// same state hash and digest; the state hash kept per write equals the set hash
// recomputed over every record, and the owed and deadline indexes equal what the
// obligations say; `posted` holds iff `Permitted`.
import t from 'tap';
import fc from 'fast-check';
import type { Applied } from './apply.js';
import { COUNTER_MAX } from './int128.js';
import { MemoryStore } from './memory-store.js';
import { isOwed } from './obligations.js';
import type { Operation } from './ops.js';
import { dueKey, type Account, type Obligation, type OwedEntry, type Usage } from './state.js';
import { TABLES } from './store.js';
import { AGENT_A, AGENT_B, EVIDENCE, Harness, intent } from './testing.js';
import { chainHolds } from './usage.js';

const BUNDLE = {
  rules: [
    { id: 'R-cap', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: '1000000', currency: 'USD' }], basis: 'cap' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'buy',
      obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 2,
        discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
        repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 2, blocks: ['purchase.*'] }] }] },
    { id: 'R-usage', modality: 'permission', priority: 100, match: { action: 'usage.record' }, basis: 'usage' },
  ],
};

const amount = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: 1n, max: 1_200_000n }) },
  { weight: 1, arbitrary: fc.constantFrom(1n, (1n << 53n) + 1n, 1n << 64n, (1n << 127n) - 1n) },
);
const delta = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: -200n, max: 5000n }) },
  { weight: 1, arbitrary: fc.constantFrom(-(1n << 127n), (1n << 127n) - 1n, 18446744073709551621n) },
);
const currency = fc.oneof({ weight: 5, arbitrary: fc.constant('USD') }, { weight: 1, arbitrary: fc.constant('EUR') });
/** Mostly the acting party's own accounts and balances; sometimes someone else's. */
const accountOf = (p: string) => fc.oneof(
  { weight: 30, arbitrary: fc.constantFrom(`acc_cash_${p}`, `acc_books_${p}`) },
  { weight: 1, arbitrary: fc.constantFrom('acc_cash_a', 'acc_cash_b', 'acc_house', 'acc_none') },
);
const usageOf = (p: string) => fc.oneof(
  { weight: 9, arbitrary: fc.constant(`usage_llm_${p}`) },
  { weight: 1, arbitrary: fc.constantFrom('usage_llm_a', 'usage_llm_b', 'usage_unowned', 'usage_none') },
);
const moveOf = (p: string) => fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.record({ usage: usageOf(p), amount: fc.record({ minor: delta, currency }) }) },
);
/** Balanced pairs most of the time, so that postings happen; arbitrary legs otherwise. */
const entriesOf = (p: string) => fc.oneof(
  { weight: 5, arbitrary: fc.array(fc.tuple(accountOf(p), accountOf(p), amount, currency), { maxLength: 2 }).map((pairs) => pairs.flatMap(([d, c, minor, cur]) => [
    { account: d, side: 'Debit', amount: { minor, currency: cur } },
    { account: c, side: 'Credit', amount: { minor, currency: cur } },
  ])) },
  { weight: 1, arbitrary: fc.array(fc.record({ account: accountOf(p), side: fc.constantFrom('Debit', 'Credit'), amount: fc.record({ minor: amount, currency }) }), { maxLength: 3 }) },
);

const intentOp = fc.constantFrom('a', 'a', 'b').chain((p) => fc.record({
  entries: entriesOf(p),
  consume_usage: moveOf(p),
  meter_usage: moveOf(p),
  bill_usage: moveOf(p),
  action: fc.constantFrom('purchase.book', 'purchase.book', 'purchase.book', 'usage.record', 'receipt.attach', 'purchase.refund', 'other.thing'),
  obligation: fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 40 }).chain((n) => fc.constantFrom(`obl_txn_p${n}_O-receipt`, `obl_txn_p${n}_O-receipt/D-refund`)) },
  ),
  evidence: fc.boolean(),
  pinned: fc.oneof({ weight: 9, arbitrary: fc.constant('pol_1') }, { weight: 1, arbitrary: fc.constant('pol_2') }),
  /** A small pool of ids: a repeated one is an idempotent replay. */
  transaction: fc.integer({ min: 1, max: 40 }).map((n) => `txn_p${n}`),
}).map((r) => {
  const moves = Object.fromEntries(Object.entries({ consume_usage: r.consume_usage, meter_usage: r.meter_usage, bill_usage: r.bill_usage }).filter(([, v]) => v));
  return intent({
    transaction: r.transaction,
    agent: p === 'a' ? AGENT_A : AGENT_B,
    entries: r.entries,
    ...moves,
    action: { action: r.action, bindings: r.obligation ? { obligation: r.obligation } : {} },
    evidence: r.evidence ? [EVIDENCE] : [],
    policy: r.pinned,
  });
}));
const op = fc.oneof(
  { weight: 8, arbitrary: intentOp },
  { weight: 2, arbitrary: fc.constant({ type: 'Tick', v: 1 } as Operation) },
);

function conservation(h: Harness): boolean {
  const sums = new Map<string, bigint>();
  for (const a of h.store.values<Account>(TABLES.account.prefix)) {
    for (const [cur, tot] of a.totals) {
      if (tot.debits < 0n || tot.credits < 0n || tot.debits > COUNTER_MAX || tot.credits > COUNTER_MAX) return false;
      sums.set(cur, (sums.get(cur) ?? 0n) + tot.debits - tot.credits);
    }
  }
  return [...sums.values()].every((s) => s === 0n);
}

/** The owed and deadline indexes hold exactly what the obligations say. */
function indexesAgree(s: MemoryStore): boolean {
  const obligations = s.values<Obligation>(TABLES.obligation.prefix);
  const owed = new Map<string, OwedEntry[]>();
  for (const o of obligations) {
    if (!isOwed(o)) continue;
    owed.set(o.party, [...(owed.get(o.party) ?? []), { id: o.id, rule: o.rule, action: o.action, deadline_tick: o.deadline_tick, state: o.state, repair_of: o.repair_of, blocks: o.blocks }]);
  }
  const stored = new Map(s.keysUnder(TABLES.owed.prefix).map((k) => [k.slice(TABLES.owed.prefix.length), s.slot(k)!.value as OwedEntry[]]));
  if (stored.size !== owed.size) return false;
  const byId = (l: OwedEntry[]) => JSON.stringify([...l].sort((a, b) => (a.id < b.id ? -1 : 1)));
  for (const [party, list] of owed) if (byId(list) !== byId(stored.get(party) ?? [])) return false;
  const due = obligations.filter((o) => o.state === 'open').map((o) => dueKey(o)).sort();
  return JSON.stringify(due) === JSON.stringify(s.keysUnder(TABLES.due.prefix));
}

/** How often each verdict or error code was reached, so a degenerate generator is caught. */
const reached = new Map<string, number>();

function check(h: Harness, op: Operation): Applied {
  const before = h.stateHash;
  const head = h.head;
  const a = h.run(op);
  if (!conservation(h)) throw new Error('conservation broken');
  for (const u of h.store.values<Usage>(TABLES.usage.prefix)) if (!chainHolds(u)) throw new Error(`chain broken on ${u.id}`);
  const v0 = a.result.ok ? (a.result.value as { kind?: string; outcome?: { verdict: string } }) : null;
  const label = !a.result.ok ? a.result.error.error : (v0?.outcome?.verdict ?? v0?.kind ?? 'tick');
  reached.set(label, (reached.get(label) ?? 0) + 1);
  if (!a.result.ok) {
    if (h.stateHash !== before) throw new Error(`refusal ${a.result.error.error} changed the state`);
    if (h.head !== head) throw new Error(`refusal ${a.result.error.error} changed the digest`);
    return a;
  }
  const v = a.result.value as { kind?: string; outcome?: { verdict: string; posted: boolean; transaction: string } };
  if (v.kind === 'replayed' && (h.stateHash !== before || h.head !== head)) throw new Error('replay changed the state or the digest');
  if (v.kind === 'recorded') {
    const o = v.outcome!;
    if (o.posted !== (o.verdict === 'Permitted')) throw new Error('posted iff Permitted broken');
    const party = h.state.agents.get((op as { agent: string }).agent)!;
    if (!o.posted && h.stateHashWithout(party, o.transaction) !== before) throw new Error(`refusal ${o.verdict} changed more than its record`);
  }
  return a;
}

function bootstrap(): Harness {
  const h = Harness.bootstrap(BUNDLE, 'pol_0');
  h.activate('pol_1', BUNDLE);
  return h;
}

const runs = { numRuns: 150 };

t.test('laws hold after every operation of a random sequence', async (t) => {
  fc.assert(fc.property(fc.array(op, { minLength: 5, maxLength: 60 }), (ops) => {
    const h = bootstrap();
    for (const o of ops) check(h, o);
  }), runs);
  t.pass('conservation, chain, refusals and posted-iff-Permitted held');
  for (const label of ['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected',
    'replayed', 'substrate_rejected', 'policy_pin_mismatch', 'tick']) {
    t.ok((reached.get(label) ?? 0) > 0, `the sequences reached ${label}`);
  }
  t.comment(JSON.stringify(Object.fromEntries(reached)));
});

t.test('replaying the same log gives the same state hash and digest', async (t) => {
  fc.assert(fc.property(fc.array(op, { minLength: 5, maxLength: 60 }), (ops) => {
    const h = bootstrap();
    for (const o of ops) h.run(o);
    const replay = new MemoryStore();
    for (const { index, op: o } of h.log) replay.apply(index, o);
    return replay.meta.stateHash === h.stateHash && replay.meta.head === h.head;
  }), runs);
  t.pass('replays converge');
});

t.test('the state hash kept per write is the set hash of every record, and the indexes agree with the obligations', async (t) => {
  fc.assert(fc.property(fc.array(op, { minLength: 5, maxLength: 60 }), (ops) => {
    const h = bootstrap();
    for (const o of ops) {
      h.run(o);
      if (h.store.recomputedStateHash() !== h.stateHash || !indexesAgree(h.store)) return false;
    }
    return true;
  }), runs);
  t.pass('incremental and recomputed hashes agree at every step');
});
