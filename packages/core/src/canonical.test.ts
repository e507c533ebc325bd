// Proves the canonical encoding follows RFC 8785 (sorted keys by UTF-16 code units,
// ECMAScript number and string forms, no white space) and extends it to bigint.
import t from 'tap';
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
