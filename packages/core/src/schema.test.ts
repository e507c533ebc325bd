// Proves the field schemas accept exactly the ranges of DESIGN §3 and name the
// field and the rule when they refuse.
import t from 'tap';
import { parseWith } from './parse.js';
import { Amount, Bindings, Counter, SignedAmount, AgentUri, TransactionId } from './schema.js';

const minor = (m: unknown) => parseWith(Amount, { minor: m, currency: 'USD' });

t.test('a leg amount is 1..2^127-1', async (t) => {
  t.ok(minor(1).ok);
  t.ok(minor((1n << 127n) - 1n).ok);
  t.ok(minor(9007199254740993n).ok, '2^53+1');
  t.ok(minor(1n << 64n).ok, '2^64');
  for (const bad of [0, -1, 1n << 127n, 1.5, 1e30, '100', null]) {
    const r = minor(bad);
    t.notOk(r.ok, String(bad));
    if (!r.ok) t.equal(r.issues[0]!.path, 'minor');
  }
  const r = minor(1.5);
  t.same(!r.ok && r.issues, [{ path: 'minor', message: 'must be a positive integer below 2^127, written as an exact integer' }]);
});

t.test('a usage delta is -2^127..2^127-1', async (t) => {
  const d = (m: bigint) => parseWith(SignedAmount, { minor: m, currency: 'USD' }).ok;
  t.ok(d(-(1n << 127n)));
  t.ok(d((1n << 127n) - 1n));
  t.ok(d(0n));
  t.notOk(d(-(1n << 127n) - 1n));
  t.notOk(d(1n << 127n));
});

t.test('a counter is 0..2^128-1', async (t) => {
  t.ok(parseWith(Counter, (1n << 128n) - 1n).ok);
  t.notOk(parseWith(Counter, 1n << 128n).ok);
  t.notOk(parseWith(Counter, -1).ok);
});

t.test('identifiers and agent URIs have their forms', async (t) => {
  t.ok(parseWith(TransactionId, 'txn_01JD7Y3K').ok);
  t.notOk(parseWith(TransactionId, 'tx_01').ok);
  t.notOk(parseWith(TransactionId, 'txn_').ok);
  t.ok(parseWith(AgentUri, 'agent://acme.example/agent/buyer-7').ok);
  t.ok(parseWith(AgentUri, 'agent://localhost:8080/agent/a').ok);
  for (const bad of ['agent://acme.example/buyer-7', 'https://acme.example/agent/x', 'agent:///agent/x', 'agent://a b/agent/x']) {
    t.notOk(parseWith(AgentUri, bad).ok, bad);
  }
});

t.test('missing fields and unknown fields are named', async (t) => {
  const r = parseWith(Amount, { currency: 'USD', extra: 1 });
  t.same(!r.ok && r.issues.map((i) => i.path).sort(), ['', 'minor']);
  t.match(!r.ok && r.issues.find((i) => i.path === '')!.message, /unknown field "extra"/);
});

t.test('bindings refuse bad names in words, "__proto__" included', async (t) => {
  const b = (v: unknown) => parseWith(Bindings, v);
  t.same(b({ Merchant: 'x' }), { ok: false, issues: [{ path: 'Merchant', message: 'binding names are lowercase words (a-z, 0-9, _)' }] });
  const proto = b(JSON.parse('{"__proto__": "x", "ok": "y"}'));
  t.equal(proto.ok, false);
  t.match(!proto.ok && proto.issues[0]!.message, /__proto__/);
  t.same(b({ merchant: 'books-r-us', n: 5, big: 18446744073709551621n, yes: true }), { ok: true, value: { merchant: 'books-r-us', n: 5n, big: 18446744073709551621n, yes: true } });
  t.same(b({ merchant: 'x'.repeat(257) }), { ok: false, issues: [{ path: 'merchant', message: 'must be a string of at most 256 characters (this one has 257)' }] }, 'a string too long says so in words');
  t.same(b({ merchant: 'x'.repeat(256) }).ok, true);
});

t.test('a missing field says it is required, a wrong one what it must be', async (t) => {
  t.same(parseWith(TransactionId, undefined), { ok: false, issues: [{ path: '', message: 'is required' }] });
  t.same(parseWith(TransactionId, 5), { ok: false, issues: [{ path: '', message: 'must be a transaction id' }] });
  t.same(parseWith(Amount, { currency: 'USD' }), { ok: false, issues: [{ path: 'minor', message: 'is required' }] });
});
