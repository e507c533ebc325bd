// Proves the drafting side of the policy language: a bundle's content hash is the
// SHA-256 of its RFC 8785 canonical form and does not depend on the key order it
// was authored in; compiled rules are in winning order whatever the authored order;
// integers may be written as JSON integers or strings of digits; every draft-time
// mistake is an issue that names its rule (and obligation and repair duty) and its
// field, never an exception inside the state machine.
import t from 'tap';
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { parseJson } from '../json.js';
import { AUTHOR, Harness } from '../testing.js';
import { bundleHash, compareBytes, compileBundle, unmatchableValues, type CompiledBundle } from './bundle.js';

const rule = (over: Record<string, unknown> = {}) => ({
  id: 'R-x', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'b', ...over,
});

function compiled(bundle: unknown): CompiledBundle {
  const c = compileBundle(bundle);
  if (!c.ok) throw new Error(JSON.stringify(c.issues));
  return c.bundle;
}

function issues(bundle: unknown): string[] {
  const c = compileBundle(bundle);
  return c.ok ? [] : c.issues.map((i) => `${i.path}: ${i.message}`);
}

t.test('the content hash is sha256 of the RFC 8785 canonical form, written out by hand', async (t) => {
  const authored = parseJson(`{"rules": [{"id": "R-cap", "modality": "prohibition", "priority": 10,
    "match": {"action": "purchase.*"},
    "when": [{"left": "amount", "op": "gt", "right": 500000, "currency": "USD"}],
    "basis": "Purchases above 5,000.00 USD are forbidden"}], "description": "caps"}`);
  const canonical = '{"description":"caps","rules":[{"basis":"Purchases above 5,000.00 USD are forbidden","id":"R-cap",'
    + '"match":{"action":"purchase.*"},"modality":"prohibition","priority":10,'
    + '"when":[{"currency":"USD","left":"amount","op":"gt","right":500000}]}]}';
  t.equal(bundleHash(authored), createHash('sha256').update(canonical, 'utf8').digest('hex'));
});

t.test('key order at any depth does not change the hash; rule order does, the compiled order does not', async (t) => {
  const a = parseJson('{"rules": [{"id": "R-a", "modality": "permission", "priority": 1, "match": {"action": "*"}, "when": [{"left": "tick", "op": "gte", "right": 2}], "basis": "x"}, {"id": "R-b", "modality": "permission", "priority": 1, "match": {"action": "*"}, "basis": "y"}]}');
  const b = parseJson('{"rules": [{"basis": "x", "when": [{"right": 2, "op": "gte", "left": "tick"}], "match": {"action": "*"}, "priority": 1, "modality": "permission", "id": "R-a"}, {"priority": 1, "basis": "y", "match": {"action": "*"}, "id": "R-b", "modality": "permission"}]}');
  t.equal(bundleHash(a), bundleHash(b));
  const reordered = { rules: [...(a as { rules: unknown[] }).rules].reverse() };
  t.not(bundleHash(reordered), bundleHash(a), 'the rules are a list: their order is content');
  t.same(compiled(reordered), compiled(a), 'but the evaluator reads them in winning order either way');
});

t.test('a drafted policy records the content hash of its bundle as authored', async (t) => {
  const h = Harness.bootstrap();
  const bundle = { rules: [rule({ when: [{ left: 'amount', op: 'lte', right: '1000', currency: 'USD' }] })] };
  const a = h.admin('DraftPolicy', { id: 'pol_2', bundle }, AUTHOR);
  t.ok(a.result.ok);
  t.equal(h.state.policies.get('pol_2')!.bundle_hash, bundleHash(bundle));
  t.not(bundleHash(bundle), bundleHash({ rules: [rule({ when: [{ left: 'amount', op: 'lte', right: 1000, currency: 'USD' }] })] }),
    'a digit string and an integer are different authored content, though they compile alike');
});

t.test('rules compile in winning order: priority, then more conditions, then smaller id by bytes', async (t) => {
  const c = compiled({ rules: [
    rule({ id: 'R-a', priority: 5 }),
    rule({ id: 'R-Z', priority: 5 }),
    rule({ id: 'R-more', priority: 5, when: [{ left: 'tick', op: 'gte', right: 0 }] }),
    rule({ id: 'R-first', priority: 1 }),
    rule({ id: 'R-no', modality: 'prohibition', priority: 3 }),
  ] });
  t.same(c.rules.map((r) => r.id), ['R-first', 'R-no', 'R-more', 'R-Z', 'R-a']);
  t.ok(compareBytes('R-Z', 'R-a') < 0, 'Z (0x5A) sorts before a (0x61) by bytes');
  t.ok(compareBytes('é', 'z') > 0, 'and by UTF-8 bytes, not by a locale');
});

t.test('compareBytes answers as Buffer.compare of the UTF-8 bytes for any UTF-16 text, lone surrogates included', async (t) => {
  const bytes = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
  t.equal(compareBytes('\uffff', '\u{10000}'), -1, 'U+FFFF (EF BF BF) sorts before U+10000 (F0 90 80 80), though its code unit is above the pair\'s');
  t.equal(compareBytes('\ud800', '\ufffd'), 0, 'a lone surrogate is encoded as U+FFFD, as before');
  t.equal(compareBytes('ab', 'abc'), -1);
  t.equal(compareBytes('', ''), 0);
  // Code units from every range that orders differently: ASCII, two- and three-byte
  // characters, both halves of a surrogate pair, and the characters above them.
  const unit = fc.oneof(
    fc.constantFrom('a', 'b', 'Z', '-', 'é', 'ÿ', '\u07ff', '\u0800', '\ud7ff'),
    fc.integer({ min: 0xd800, max: 0xdfff }).map((u) => String.fromCharCode(u)),
    fc.integer({ min: 0xe000, max: 0xffff }).map((u) => String.fromCharCode(u)),
    fc.constantFrom('\u{1f600}', '\u{10000}', '\u{10ffff}'),
  );
  const text = fc.string({ unit, maxLength: 6 });
  fc.assert(fc.property(text, text, text, (prefix, a, b) => {
    const x = prefix + a;
    const y = prefix + b;
    return compareBytes(x, y) === bytes(x, y) && compareBytes(y, x) === bytes(y, x) && compareBytes(x, x) === 0;
  }), { numRuns: 20_000 });
});

t.test('integers may be written as JSON integers or strings of digits, up to 128 bits', async (t) => {
  const right = (r: unknown, left = 'amount') => compiled({ rules: [rule({ when: [{ left, op: 'gt', right: r, ...(left === 'amount' ? { currency: 'USD' } : {}) }] })] }).rules[0]!.when[0]!.right;
  t.equal(right(500000), 500000n);
  t.equal(right('500000'), 500000n);
  t.equal(right('-7', 'tick'), -7n);
  t.equal(right(parseJson('340282366920938463463374607431768211455')), (1n << 128n) - 1n);
  t.equal(right('340282366920938463463374607431768211455'), (1n << 128n) - 1n);
  t.equal(right('5', 'bindings.quantity'), 5n, 'an ordering on a binding reads digits as an integer');
  const eq = compiled({ rules: [rule({ when: [{ left: 'bindings.code', op: 'eq', right: '5' }, { left: 'bindings.n', op: 'in', right: [5, 'five', true] }] })] }).rules[0]!.when;
  t.equal(eq[0]!.right, '5', 'eq on a binding keeps a string a string');
  t.same(eq[1]!.right, [5n, 'five', true]);
  t.same(issues({ rules: [rule({ when: [{ left: 'amount', op: 'gt', right: 1e21, currency: 'USD' }] })] }),
    ['rules.0.when.0.right: rule R-x: gt on amount needs an integer (or a string of digits) as right'],
    'a number JSON cannot carry exactly is refused, not rounded');
  t.equal(right('-340282366920938463463374607431768211455', 'tick'), -((1n << 128n) - 1n), '128 bits below zero too');
  const wide = 'rules.0.when.0.right: rule R-x: gt on amount needs an integer of at most 128 bits (2^128-1 either way) as right';
  for (const r of [parseJson('340282366920938463463374607431768211456'), '340282366920938463463374607431768211456', '1'.padEnd(61, '0'), parseJson('1'.padEnd(61, '0'))]) {
    t.same(issues({ rules: [rule({ when: [{ left: 'amount', op: 'gt', right: r, currency: 'USD' }] })] }), [wide], `${String(r).slice(0, 12)}…: the number and the string alike`);
  }
});

t.test('every draft-time mistake names the rule and the field', async (t) => {
  const cases: [string, unknown, string[]][] = [
    ['unknown operator', { rules: [rule({ when: [{ left: 'tick', op: 'after', right: 1 }] })] },
      ['rules.0.when.0.op: rule R-x: op "after" is not an operator (one of eq, ne, lt, lte, gt, gte, in, not_in, prefix, contains, count_gte, count_lte)']],
    ['unknown field', { rules: [rule({ priorty: 1 })] }, ['rules.0: rule R-x: unknown field "priorty"']],
    ['a list too long', { rules: [rule({ when: [{ left: 'party', op: 'in', right: Array.from({ length: 257 }, (_, i) => `p${i}`) }] })] },
      ['rules.0.when.0.right: rule R-x: right must list at most 256 values, not 257']],
    ['a right side of null', { rules: [rule({ when: [{ left: 'tick', op: 'gt', right: null }] })] },
      ['rules.0.when.0.right: rule R-x: right must be a string (at most 256 characters), an integer, a boolean, or a list of them']],
    ['an empty basis', { rules: [rule({ basis: '' })] }, ['rules.0.basis: rule R-x: basis must not be empty']],
    ['33 conditions', { rules: [rule({ when: Array.from({ length: 33 }, () => ({ left: 'tick', op: 'gt', right: 1 })) })] }, ['rules.0.when: rule R-x: when must hold at most 32 conditions']],
    ['a description too long', { description: 'x'.repeat(4097), rules: [rule()] }, ['description: description must be at most 4096 characters']],
    ['a deadline too far', { rules: [rule({ obligations: [{ id: 'O-1', action: 'receipt.attach', deadline_ticks: 1_000_000_001 }] })] },
      ['rules.0.obligations.0.deadline_ticks: rule R-x, obligation O-1: deadline_ticks must be a number of ticks from 1 to 1000000000']],
    ['duplicate rule id', { rules: [rule(), rule({ priority: 1 })] }, ['rules.1.id: rule R-x: duplicate rule id R-x']],
    ['repair duty with no deadline', { rules: [rule({ obligations: [{ id: 'O-r', action: 'receipt.attach', deadline_ticks: 2, repair: [{ id: 'D-f', action: 'purchase.refund' }] }] })] },
      ['rules.0.obligations.0.repair.0.deadline_ticks: rule R-x, obligation O-r, repair duty D-f: deadline_ticks is required']],
    ['obligation with no deadline', { rules: [rule({ obligations: [{ id: 'O-r', action: 'receipt.attach' }] })] },
      ['rules.0.obligations.0.deadline_ticks: rule R-x, obligation O-r: deadline_ticks is required']],
    ['a value the evaluator cannot read', { rules: [rule({ when: [{ left: 'usage.total', op: 'gt', right: 1 }] })] },
      ['rules.0.when.0.left: rule R-x: the evaluator cannot read "usage.total" (it reads amount, currency, accounts, evidence, party, agent, action, tick, usage.consume, usage.meter, usage.bill, usage.balance and bindings.<name>)']],
    ['an operator that does not fit', { rules: [rule({ when: [{ left: 'evidence', op: 'eq', right: 'x' }] })] },
      ['rules.0.when.0.op: rule R-x: operator eq does not apply to evidence (use contains, in, not_in, count_gte, count_lte)']],
    ['amount without currency', { rules: [rule({ when: [{ left: 'amount', op: 'gt', right: 1 }] })] },
      ['rules.0.when.0.currency: rule R-x: a condition on amount names its currency']],
    ['obligations on a prohibition', { rules: [rule({ modality: 'prohibition', obligations: [{ id: 'O-r', action: 'a.b', deadline_ticks: 1 }] })] },
      ['rules.0.obligations: rule R-x: a prohibition imposes no obligations']],
    ['reserved rule id', { rules: [rule({ id: 'default-deny' })] }, ['rules.0.id: rule default-deny: the id default-deny is reserved']],
    ['a condition of a repair duty', { rules: [rule({ obligations: [{ id: 'O-r', action: 'receipt.attach', deadline_ticks: 2, repair: [{ id: 'D-f', action: 'purchase.refund', deadline_ticks: 1, discharge_when: [{ left: 'party', op: 'gt', right: 1 }] }] }] })] },
      ['rules.0.obligations.0.repair.0.discharge_when.0.op: rule R-x, obligation O-r, repair duty D-f: operator gt does not apply to party (use eq, ne, in, not_in, prefix)']],
    ['duplicate repair duty id', { rules: [rule({ obligations: [{ id: 'O-r', action: 'receipt.attach', deadline_ticks: 2, repair: [{ id: 'D-f', action: 'a.b', deadline_ticks: 1 }, { id: 'D-f', action: 'a.c', deadline_ticks: 1 }] }] })] },
      ['rules.0.obligations.0.repair.1.id: rule R-x, obligation O-r, repair duty D-f: duplicate repair duty id D-f']],
    ['an obligation id with the separator of obligation ids', { rules: [rule({ obligations: [{ id: 'O_r', action: 'a.b', deadline_ticks: 1 }] })] },
      ['rules.0.obligations.0.id: rule R-x, obligation O_r: id must be an obligation id (a letter, then letters, digits or . : -; no _)']],
    ['a rule without an id is named by its position', { rules: [{ modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b' }] },
      ['rules.0.id: rule #0: id is required']],
    ['an empty in list', { rules: [rule({ when: [{ left: 'party', op: 'in', right: [] }] })] },
      ['rules.0.when.0.right: rule R-x: right must list at least one value']],
    ['no rules at all', { rules: [] }, ['rules: rules must hold at least one rule']],
    ['too many rules', { rules: Array.from({ length: 257 }, (_, i) => rule({ id: `R-${i}` })) }, ['rules: rules must hold at most 256 rules']],
    ['a bundle that is not an object', 'permit everything', [': the bundle: must be an object']],
  ];
  for (const [what, bundle, want] of cases) t.same(issues(bundle), want, what);
});

t.test('a bundle that would have thrown while compiling is an issue, and drafting it records nothing', async (t) => {
  const h = Harness.bootstrap();
  const cases: unknown[] = [
    { left: 'constructor', op: 'eq', right: 'x' },
    { left: 'toString', op: 'eq', right: 'x' },
    { left: '__proto__', op: 'eq', right: 'x' },
    { left: 'hasOwnProperty', op: 'in', right: ['x'] },
    { left: 'bindings.quantity', op: 'eq', right: 1.5 },
    { left: 'bindings.quantity', op: 'in', right: [1, 2.5] },
    { left: 'bindings.quantity', op: 'ne' },
    // Integers beyond 2^53 are parsed as bigints: their messages once threw at the commit point.
    { left: 'amount', op: 9007199254740993n, right: '1', currency: 'USD' },
    { left: 'amount', op: [1n], right: '1', currency: 'USD' },
    { left: 'amount', op: { toString: 1, valueOf: 2n }, right: '1', currency: 'USD' },
    { left: 'amount', op: Object.create(null) as unknown, right: '1', currency: 'USD' },
    { left: 9007199254740993n, op: 'eq', right: 2n ** 200n },
  ];
  for (const [k, condition] of cases.entries()) {
    const before = h.stateHash;
    const a = h.admin('DraftPolicy', { id: `pol_bad${k}`, bundle: { rules: [rule({ modality: 'prohibition', when: [condition] })] } }, AUTHOR);
    t.equal(a.result.ok ? 'ok' : a.result.error.error, 'invalid_policy', `case ${k}`);
    t.equal(h.stateHash, before);
  }
});

t.test('a draft lists its problems of shape and of meaning together, not the first kind only', async (t) => {
  const got = issues({
    rules: [
      rule({ note: 'x', priority: -1, when: [{ left: 'tick', op: 'between', right: 1 }, { left: 'amout', op: 'gt', right: 1 }] }),
      rule({ id: 'R-q', when: [{ left: 'amount', op: 'gt', right: 5 }] }),
    ],
  });
  t.same(got, [
    'rules.0.priority: rule R-x: priority must be an integer from 0 to 1000000 (lower wins)',
    'rules.0.when.0.op: rule R-x: op "between" is not an operator (one of eq, ne, lt, lte, gt, gte, in, not_in, prefix, contains, count_gte, count_lte)',
    'rules.0: rule R-x: unknown field "note"',
    'rules.0.when.1.left: rule R-x: the evaluator cannot read "amout" (it reads amount, currency, accounts, evidence, party, agent, action, tick, usage.consume, usage.meter, usage.bill, usage.balance and bindings.<name>)',
    'rules.1.when.0.currency: rule R-q: a condition on amount names its currency',
  ]);
});

t.test('right sides no value the evaluator reads can ever be are found; the commit point still compiles them', async (t) => {
  const bundle = {
    rules: [
      rule({ when: [{ left: 'currency', op: 'eq', right: 'usd' }, { left: 'party', op: 'in', right: ['party_a', 'party a'] }] }),
      rule({ id: 'R-y', modality: 'prohibition', when: [{ left: 'accounts', op: 'contains', right: 'cash' }, { left: 'action', op: 'ne', right: 'Purchase.Book' }] }),
      rule({ id: 'R-z', obligations: [{ id: 'pay', action: 'invoice.pay', deadline_ticks: 5, discharge_when: [{ left: 'usage.balance', op: 'eq', right: 'llm' }],
        repair: [{ id: 'fix', action: 'invoice.fix', deadline_ticks: 2, discharge_when: [{ left: 'agent', op: 'not_in', right: ['agent://a.example/agent/x', 'bot'] }] }] }] }),
      rule({ id: 'R-ok', when: [{ left: 'currency', op: 'in', right: ['USD', 'EUR'] }, { left: 'currency', op: 'prefix', right: 'U' }, { left: 'bindings.code', op: 'eq', right: 'usd' }] }),
    ],
  };
  t.ok(compileBundle(bundle).ok, 'it compiles, as a log drafted before this check replays');
  t.same(unmatchableValues(bundle).map((i) => `${i.path}: ${i.message}`), [
    'rules.0.when.0.right: rule R-x: currency is never "usd": it is always a currency code (3 to 12 capitals or digits, starting with a capital, as USD)',
    'rules.0.when.1.right.1: rule R-x: party is never "party a": it is always a party id',
    'rules.1.when.0.right: rule R-y: accounts never holds "cash": each is an account id (acc_<id>)',
    'rules.1.when.1.right: rule R-y: action is never "Purchase.Book": it is always an action name (dotted lowercase words, as purchase.book)',
    'rules.2.obligations.0.discharge_when.0.right: rule R-z, obligation pay: usage.balance is never "llm": it is always a usage-balance id (usage_<id>)',
    'rules.2.obligations.0.repair.0.discharge_when.0.right.1: rule R-z, obligation pay, repair duty fix: agent is never "bot": it is always an agent URI (agent://<authority>/agent/<agent_id>)',
  ]);
  t.same(unmatchableValues({ rules: [rule({ when: [{ left: 'currency', op: 'eq', right: 'usd' }], note: 1 })] }), [], 'a bundle that does not parse has none: its issues are compileBundle\'s');
  t.same(unmatchableValues({ rules: [rule()] }), [], 'a sound bundle has none');
});

t.test('compiling any bundle a JSON parser could give answers ok or issues, and never throws', async (t) => {
  // What the lossless parser makes: plain values, bigints for integers beyond 2^53,
  // objects with any keys. Compiling runs at the commit point, where a throw halts the replica.
  const value = fc.anything({ withBigInt: true, withNullPrototype: true, maxDepth: 3 });
  const condition = fc.record({ left: fc.oneof(fc.constantFrom('amount', 'currency', 'accounts', 'bindings.quantity'), value), op: fc.oneof(fc.constantFrom('eq', 'in', 'gt'), value), right: value, currency: fc.oneof(fc.constant('USD'), value) }, { requiredKeys: [] });
  const rule = fc.record({
    id: fc.oneof(fc.constant('R-a'), value), modality: fc.oneof(fc.constantFrom('permission', 'prohibition'), value), priority: fc.oneof(fc.constant(1), value),
    match: fc.oneof(fc.constant({ action: '*' }), value), when: fc.oneof(fc.array(condition, { maxLength: 3 }), value), basis: fc.oneof(fc.constant('b'), value),
    obligations: fc.array(fc.record({ id: fc.constant('O-1'), action: fc.constant('receipt.attach'), deadline_ticks: fc.oneof(fc.constant(5), value), discharge_when: fc.array(condition, { maxLength: 2 }) }), { maxLength: 1 }),
  }, { requiredKeys: ['id'] });
  const bundle = fc.oneof(fc.record({ rules: fc.array(rule, { maxLength: 3 }) }), value);
  // Left sides that name what every object has: the lookup of their value forms must not find it.
  for (const left of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
    for (const [op, right] of [['eq', 'x'], ['in', ['x']], ['contains', 'x']] as const) {
      const b = { rules: [{ id: 'R-a', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b', when: [{ left, op, right }] }] };
      t.same(unmatchableValues(b), [], `${left} ${op}: not a field with a value form`);
      t.equal(compileBundle(b).ok, false, `${left} ${op}: an issue of the bundle`);
    }
  }
  fc.assert(fc.property(bundle, (b) => {
    const compiled = compileBundle(b);
    unmatchableValues(b);
    return compiled.ok || (compiled.issues.length > 0 && compiled.issues.every((i) => typeof i.message === 'string'));
  }), { numRuns: 2000, seed: 20261127 });
  t.pass('2,000 bundles compiled without a throw');
});
