// Proves the canonical encoding follows RFC 8785 (sorted keys by UTF-16 code units,
// ECMAScript number and string forms, no white space) and extends it to bigint.
import t from 'tap';
import fc from 'fast-check';
import { canonicalHash, canonicalJson, sha256Hex } from './canonical.js';

t.test('keys are sorted by UTF-16 code units at every depth', async (t) => {
  t.equal(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } }), '{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}');
  // RFC 8785 §3.2.3 sorting example: code-unit order, not locale order.
  const keys = { '\u20ac': 'Euro Sign', '\r': 'Carriage Return', '\ufb33': 'Hebrew Letter Dalet With Dagesh', '1': 'One', '\ud83d\ude00': 'Emoji: Grinning Face', '\u0080': 'Control', '\u00f6': 'Latin Small Letter O With Diaeresis' };
  // Read the order from the text: JSON.parse would move the integer-like key "1" first.
  const order = ['\r', '1', '\u0080', '\u00f6', '\u20ac', '\ud83d\ude00', '\ufb33'].map((k) => canonicalJson(keys).indexOf(JSON.stringify(k)));
  t.same(order, [...order].sort((a, b) => a - b));
  t.notOk(order.includes(-1));
});

t.test('numbers use the ECMAScript form and bigints their exact digits', async (t) => {
  t.equal(canonicalJson([1e21, 0.1, -0, 1e-7, 333333333.33333329]), '[1e+21,0.1,0,1e-7,333333333.3333333]');
  t.equal(canonicalJson({ n: (1n << 128n) - 1n }), '{"n":340282366920938463463374607431768211455}');
  t.throws(() => canonicalJson(Number.NaN));
  t.throws(() => canonicalJson(new Map()));
});

t.test('undefined members are omitted, as JSON does', async (t) => {
  t.equal(canonicalJson({ a: undefined, b: 1 }), '{"b":1}');
});

t.test('the hash of a value does not depend on the order it was built in', async (t) => {
  t.equal(canonicalHash({ a: 1, b: 2 }), canonicalHash({ b: 2, a: 1 }));
  t.equal(sha256Hex(''), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
});

t.test('integer-like keys are sorted as strings, not in the engine\'s numeric order', async (t) => {
  t.equal(canonicalJson({ 10: 'a', 2: 'b', x: { 1: 0, 0: 1 } }), '{"10":"a","2":"b","x":{"0":1,"1":0}}');
  t.equal(canonicalJson({ 1: 'a', 2: 'b' }), '{"1":"a","2":"b"}');
});

t.test('undefined items are null, a null-prototype object is plain, and no toJSON is called', async (t) => {
  t.equal(canonicalJson({ a: [1, undefined, { b: 2n }], c: 'x' }), '{"a":[1,null,{"b":2}],"c":"x"}');
  t.equal(canonicalJson([, 1]), '[null,1]', 'a hole is null');
  t.equal(canonicalJson(Object.assign(Object.create(null) as object, { b: 1, a: -0 })), '{"a":0,"b":1}');
  t.throws(() => canonicalJson({ a: Number.POSITIVE_INFINITY }), TypeError);
  t.throws(() => canonicalJson({ a: new Date(0) }), TypeError, 'a Date is not written as its toJSON');
  t.throws(() => canonicalJson({ a: () => 1 }), TypeError);
  t.throws(() => canonicalJson([Symbol('s')]), TypeError);
});

/** The canonical form written the plainest way, as the oracle. */
function reference(v: unknown): string {
  if (typeof v === 'bigint') return v.toString();
  if (Array.isArray(v)) return `[${v.map((x) => reference(x === undefined ? null : x)).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).sort().filter((k) => o[k] !== undefined).map((k) => `${JSON.stringify(k)}:${reference(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

t.test('any JSON-like value, sorted or not, with bigints or not, has the reference form', async (t) => {
  const key = fc.oneof(fc.string({ maxLength: 4 }), fc.constantFrom('0', '1', '10', '2', 'a', 'b', '\u20ac', '\ud83d\ude00'));
  const leaf = fc.oneof(fc.string(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer(), fc.bigInt(), fc.boolean(), fc.constant(null), fc.constant(undefined));
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('value'), { maxLength: 5 }), fc.dictionary(key, tie('value'), { maxKeys: 6 })),
  }));
  // One assertion for the lot: fast-check throws with the smallest counterexample.
  t.doesNotThrow(() => fc.assert(fc.property(value, (v) => {
    const root = v === undefined ? null : v;
    return canonicalJson(root) === reference(root);
  }), { numRuns: 2000 }));
});

t.test('every string is written as JSON.stringify writes it, escapes and lone surrogates included', async (t) => {
  // Any UTF-16 code unit, so that controls, quotes, backslashes and halves of surrogate pairs all come up.
  const unit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
  const text = fc.oneof(fc.string({ unit, maxLength: 12 }), fc.string({ unit: 'binary-ascii', maxLength: 12 }), fc.string({ maxLength: 40 }));
  t.doesNotThrow(() => fc.assert(fc.property(text, (s) => canonicalJson(s) === JSON.stringify(s) && canonicalJson({ [s]: s }) === `{${JSON.stringify(s)}:${JSON.stringify(s)}}`), { numRuns: 2000 }));
  for (const s of ['', 'a"b', 'a\\b', '\u001f', '\u007f', '\u00e9', '\ud800', 'x\udfff', '\ud83d\ude00']) {
    t.equal(canonicalJson(s), JSON.stringify(s), JSON.stringify(s));
  }
});

t.test('objects of few keys and of many are sorted alike', async (t) => {
  // A handful of keys is sorted by insertion, more than sixteen by Array#sort: both in code-unit order.
  const key = fc.oneof(fc.string({ maxLength: 3 }), fc.constantFrom('1', '10', '2', 'B', 'a', '\u00f6', '\u20ac', '\ud83d\ude00', '\ufb33'));
  for (const [minKeys, maxKeys] of [[2, 16], [17, 60]] as const) {
    t.doesNotThrow(() => fc.assert(fc.property(fc.dictionary(key, fc.integer(), { minKeys, maxKeys }), (o) => canonicalJson(o) === reference(o)), { numRuns: 500 }), `${minKeys} to ${maxKeys} keys`);
  }
});

t.test('names past the member caches\' bound are encoded alike', async (t) => {
  // The opening text of a member is cached for the first few thousand names; a name
  // first seen after that is built each time, and a name both first and later in an
  // object has two cached forms.
  const many = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`name_${i}`, i]));
  t.equal(canonicalJson(many), reference(many));
  t.equal(canonicalJson(many), reference(many), 'again, from the caches');
  const fresh = { zz_fresh: 1, aa_fresh: { zz_fresh: 'a"b', aa_fresh: [] } };
  t.equal(canonicalJson(fresh), '{"aa_fresh":{"aa_fresh":[],"zz_fresh":"a\\"b"},"zz_fresh":1}');
});
