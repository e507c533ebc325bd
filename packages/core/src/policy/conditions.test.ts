// Proves what a condition reads from an intent and how each operator compares:
// every left-hand value, every operator holding, failing, and not evaluable (a
// missing value, legs in several currencies, a binding of another type), and the
// words a basis uses for each, with the real figures.
import t from 'tap';
import type { Entry } from '../schema.js';
import { compileBundle, type CompiledCondition } from './bundle.js';
import { describeFailed, describeHeld, evaluate, read, type Facts } from './conditions.js';

function cond(c: Record<string, unknown>): CompiledCondition {
  const compiled = compileBundle({ rules: [{ id: 'R', modality: 'permission', priority: 1, match: { action: '*' }, when: [c], basis: 'b' }] });
  if (!compiled.ok) throw new Error(JSON.stringify(compiled.issues));
  return compiled.bundle.rules[0]!.when[0]!;
}

const leg = (account: string, side: 'Debit' | 'Credit', minor: bigint, currency = 'USD'): Entry => ({ account, side, amount: { minor, currency } });

const FACTS: Facts = {
  party: 'party_acme',
  agent: 'agent://acme.example/agent/buyer-7',
  action: 'purchase.book',
  bindings: { merchant: 'books-r-us', quantity: 3n, gift: false },
  entries: [leg('acc_cash_a', 'Debit', 700n), leg('acc_books_a', 'Credit', 700n), leg('acc_cash_a', 'Debit', 50n), leg('acc_books_a', 'Credit', 50n)],
  moves: { consume_usage: { usage: 'usage_llm_a', amount: { minor: 40n, currency: 'USD' } }, bill_usage: { usage: 'usage_llm_a', amount: { minor: -5n, currency: 'USD' } } },
  evidence: ['a'.repeat(64), 'b'.repeat(64)],
  tick: 42,
};

const holds = (c: Record<string, unknown>, f: Facts = FACTS) => evaluate(cond(c), f).holds;

t.test('each left-hand value reads what the language says it reads', async (t) => {
  const r = (left: string, extra: Record<string, unknown> = {}, f: Facts = FACTS) => read(cond({ left, op: 'in', right: ['x'], ...extra }), f);
  t.equal(read(cond({ left: 'amount', op: 'gt', right: 0, currency: 'USD' }), FACTS), 750n, 'amount sums the debit legs of its currency');
  t.equal(read(cond({ left: 'amount', op: 'gt', right: 0, currency: 'EUR' }), FACTS), 0n, 'and is 0 in a currency the legs do not use');
  t.equal(r('currency'), 'USD');
  t.equal(r('currency', {}, { ...FACTS, entries: [...FACTS.entries, leg('acc_cash_a', 'Debit', 1n, 'EUR')] }), null, 'two currencies: not readable');
  t.equal(r('currency', {}, { ...FACTS, entries: [] }), null, 'no legs: not readable');
  t.same(r('accounts'), ['acc_books_a', 'acc_cash_a'], 'each account once, in byte order');
  t.same(r('evidence'), FACTS.evidence);
  t.equal(r('party'), 'party_acme');
  t.equal(r('agent'), FACTS.agent);
  t.equal(r('action'), 'purchase.book');
  t.equal(read(cond({ left: 'tick', op: 'gt', right: 0 }), FACTS), 42n);
  t.equal(read(cond({ left: 'usage.consume', op: 'gt', right: 0 }), FACTS), 40n);
  t.equal(read(cond({ left: 'usage.meter', op: 'gt', right: 0 }), FACTS), 0n, 'an absent move reads 0');
  t.equal(read(cond({ left: 'usage.bill', op: 'gt', right: 0 }), FACTS), -5n, 'a correction reads negative');
  t.equal(r('usage.balance'), 'usage_llm_a');
  t.equal(r('usage.balance', {}, { ...FACTS, moves: {} }), null, 'no move: no balance');
  t.equal(r('usage.balance', {}, { ...FACTS, moves: { ...FACTS.moves, meter_usage: { usage: 'usage_other', amount: { minor: 1n, currency: 'USD' } } } }), null, 'two balances: not readable');
  t.equal(r('bindings.merchant'), 'books-r-us');
  t.equal(r('bindings.quantity'), 3n);
  t.equal(r('bindings.gift'), false);
  t.equal(r('bindings.colour'), null, 'a missing binding is not readable');
});

t.test('eq and ne compare exactly, and only values of one type', async (t) => {
  t.equal(holds({ left: 'party', op: 'eq', right: 'party_acme' }), true);
  t.equal(holds({ left: 'party', op: 'eq', right: 'Party_Acme' }), false);
  t.equal(holds({ left: 'party', op: 'ne', right: 'party_globex' }), true);
  t.equal(holds({ left: 'amount', op: 'eq', right: '750', currency: 'USD' }), true);
  t.equal(holds({ left: 'bindings.quantity', op: 'eq', right: 3 }), true);
  t.equal(holds({ left: 'bindings.quantity', op: 'eq', right: '3' }), null, 'an integer binding is not the string "3"');
  t.equal(holds({ left: 'bindings.quantity', op: 'ne', right: '3' }), null);
  t.equal(holds({ left: 'bindings.gift', op: 'eq', right: false }), true);
  t.equal(holds({ left: 'bindings.colour', op: 'ne', right: 'red' }), null, 'a missing binding differs from nothing: not evaluable');
});

t.test('lt, lte, gt and gte order integers and include or exclude the bound', async (t) => {
  const at = (op: string, right: unknown) => holds({ left: 'tick', op, right });
  t.same([at('lt', 42), at('lte', 42), at('gt', 42), at('gte', 42)], [false, true, false, true]);
  t.same([at('lt', 43), at('gt', 41)], [true, true]);
  t.equal(holds({ left: 'amount', op: 'gt', right: '340282366920938463463374607431768211455', currency: 'USD' }), false, '128-bit bounds compare exactly');
  t.equal(holds({ left: 'bindings.quantity', op: 'lte', right: 10 }), true);
  t.equal(holds({ left: 'bindings.merchant', op: 'lte', right: 10 }), null, 'a string binding has no order');
  t.equal(holds({ left: 'usage.bill', op: 'lt', right: 0 }), true);
});

t.test('in and not_in on a single value: one of, none of; a value of another type cannot be compared', async (t) => {
  t.equal(holds({ left: 'currency', op: 'in', right: ['EUR', 'USD'] }), true);
  t.equal(holds({ left: 'currency', op: 'not_in', right: ['EUR', 'USD'] }), false);
  t.equal(holds({ left: 'tick', op: 'in', right: [41, '42'] }), true);
  t.equal(holds({ left: 'bindings.quantity', op: 'in', right: [1, 'three'] }), false, 'the integer item is compared, the string one ignored');
  t.equal(holds({ left: 'bindings.quantity', op: 'in', right: ['3', 'three'] }), null, 'no item is an integer');
  t.equal(holds({ left: 'bindings.quantity', op: 'not_in', right: ['3'] }), null);
  t.equal(holds({ left: 'bindings.colour', op: 'not_in', right: ['red'] }), null);
});

t.test('in, not_in, contains and the counts on a list value', async (t) => {
  t.equal(holds({ left: 'accounts', op: 'in', right: ['acc_cash_a', 'acc_books_a', 'acc_x'] }), true, 'every item is listed');
  t.equal(holds({ left: 'accounts', op: 'in', right: ['acc_cash_a'] }), false);
  t.equal(holds({ left: 'accounts', op: 'in', right: ['acc_x'] }, { ...FACTS, entries: [] }), true, 'no items: every one of none is listed');
  t.equal(holds({ left: 'accounts', op: 'not_in', right: ['acc_x', 'acc_y'] }), true, 'no item is listed');
  t.equal(holds({ left: 'accounts', op: 'not_in', right: ['acc_cash_a'] }), false);
  t.equal(holds({ left: 'accounts', op: 'contains', right: 'acc_cash_a' }), true);
  t.equal(holds({ left: 'evidence', op: 'contains', right: 'c'.repeat(64) }), false);
  t.same([2, 3].map((n) => holds({ left: 'evidence', op: 'count_gte', right: n })), [true, false]);
  t.same([1, 2].map((n) => holds({ left: 'evidence', op: 'count_lte', right: n })), [false, true]);
  t.equal(holds({ left: 'evidence', op: 'count_lte', right: 0 }, { ...FACTS, evidence: [] }), true);
});

t.test('prefix reads the start of a string', async (t) => {
  t.equal(holds({ left: 'agent', op: 'prefix', right: 'agent://acme.example/' }), true);
  t.equal(holds({ left: 'action', op: 'prefix', right: 'purchase.' }), true);
  t.equal(holds({ left: 'bindings.merchant', op: 'prefix', right: 'test-' }), false);
  t.equal(holds({ left: 'bindings.quantity', op: 'prefix', right: '3' }), null, 'an integer has no prefix');
});

t.test('a basis states the real figures in plain words', async (t) => {
  const held = (c: Record<string, unknown>, f: Facts = FACTS) => { const k = cond(c); return describeHeld(k, evaluate(k, f), f.action); };
  const failed = (c: Record<string, unknown>, f: Facts = FACTS) => { const k = cond(c); return describeFailed(k, evaluate(k, f)); };
  t.equal(held({ left: 'amount', op: 'gt', right: 500, currency: 'USD' }), 'Purchase of 750 USD minor units exceeds the 500 limit');
  t.equal(held({ left: 'amount', op: 'gte', right: 750, currency: 'USD' }), 'Purchase of 750 USD minor units reaches the 750 limit');
  t.equal(held({ left: 'amount', op: 'in', right: [750], currency: 'USD' }), 'Purchase of 750 USD minor units is one of [750]');
  t.equal(held({ left: 'bindings.merchant', op: 'eq', right: 'books-r-us' }), 'bindings.merchant "books-r-us" equals "books-r-us"');
  t.equal(held({ left: 'evidence', op: 'count_gte', right: 2 }), 'evidence has 2 items, at least 2');
  t.equal(held({ left: 'evidence', op: 'count_lte', right: 1 }, { ...FACTS, evidence: ['a'.repeat(64)] }), 'evidence has 1 item, at most 1');
  t.equal(held({ left: 'bindings.colour', op: 'eq', right: 'red' }), 'bindings.colour could not be evaluated, so the rule applies (fail closed)');
  t.equal(failed({ left: 'amount', op: 'lte', right: 500, currency: 'USD' }), 'amount in USD 750 does not satisfy lte 500');
  t.equal(failed({ left: 'accounts', op: 'contains', right: 'acc_x' }), 'accounts [acc_books_a, acc_cash_a] does not satisfy contains "acc_x"');
  t.equal(failed({ left: 'evidence', op: 'count_gte', right: 3 }), 'evidence has 2 items, not at least 3');
  t.equal(failed({ left: 'currency', op: 'eq', right: 'USD' }, { ...FACTS, entries: [] }), 'currency could not be evaluated');
  t.equal(failed({ left: 'bindings.gift', op: 'eq', right: true }), 'bindings.gift false does not satisfy eq true');
});
