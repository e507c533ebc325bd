// Proves the SDK's codec: integers beyond 2^53 are read exactly and written as bare
// numbers (a JavaScript number beyond 2^53 is refused, not sent rounded), and a decode plan makes every 128-bit field a bigint, small ones too,
// through arrays, named properties and the others (bindings), leaving the rest.
import t from 'tap';
import { decodeWith, hasJsonSourceText, parseJson, stringifyJson, type Plan } from './json.js';

t.test('integers beyond 2^53 are exact both ways, as bare numbers', async (t) => {
  t.ok(hasJsonSourceText());
  const text = '{"a":18446744073709551621,"b":-170141183460469231731687303715884105728,"c":1.5,"d":12,"e":1e400}';
  const v = parseJson(text) as Record<string, unknown>;
  t.equal(v.a, 18446744073709551621n);
  t.equal(v.b, -170141183460469231731687303715884105728n);
  t.equal(v.c, 1.5);
  t.equal(v.d, 12);
  t.equal(v.e, Infinity, 'a literal with an exponent is not an integer literal');
  t.equal(stringifyJson({ a: 18446744073709551621n, n: 2 }), '{"a":18446744073709551621,"n":2}');
  t.throws(() => stringifyJson(undefined), TypeError);
  // A number literal beyond 2^53 may already be another number: it is refused, not sent rounded.
  t.throws(() => stringifyJson({ amount: { minor: 9007199254740993, currency: 'EUR' } }), {
    name: 'RangeError', message: '"minor" is an integer beyond 2^53 (9007199254740992 as the number holds it), which a JavaScript number does not hold exactly: give it as a bigint.',
  });
  t.throws(() => stringifyJson(2 ** 60), { name: 'RangeError', message: /^The value is an integer beyond 2\^53 \(1152921504606846976 as/ });
  t.equal(stringifyJson({ a: Number.MAX_SAFE_INTEGER, b: -Number.MAX_SAFE_INTEGER, c: 1.5 }), '{"a":9007199254740991,"b":-9007199254740991,"c":1.5}', 'safe integers and fractions pass');
});

t.test('a plan turns exactly the 128-bit fields into bigint', async (t) => {
  const plan: Plan = { p: { balances: { i: { p: { net: 'int' } } }, action: { p: { bindings: { a: 'int' } } }, named: {} }, a: 'int' };
  const v = decodeWith<Record<string, unknown>>(parseJson('{"balances":[{"net":5,"currency":"USD"},{"net":18446744073709551621}],"action":{"bindings":{"n":3,"s":"x","b":true}},"named":7,"other":9,"tick":{"x":1}}'), plan);
  t.same(v.balances, [{ net: 5n, currency: 'USD' }, { net: 18446744073709551621n }]);
  t.same(v.action, { bindings: { n: 3n, s: 'x', b: true } });
  t.equal(v.named, 7, 'a named property without an integer is left');
  t.equal(v.other, 9n, 'the others follow a');
  t.same(v.tick, { x: 1 }, 'a plan does not reach into what it does not name');
  t.equal(decodeWith(3, undefined), 3);
  t.same(decodeWith([1, 2], 'int'), [1, 2], 'an array under a scalar plan is left');
  t.same(decodeWith({ x: 1 }, 'int'), { x: 1 });
  t.same(decodeWith([1, 2], { i: 'int' }), [1n, 2n]);
  t.same(decodeWith([1, 2], { p: {} }), [1, 2]);
  t.equal(decodeWith(null, { p: {} }), null);
});
