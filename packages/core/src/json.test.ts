// Proves that the JSON codec keeps 128-bit integers exact both ways, at and past
// every boundary the ledger uses, and refuses malformed text.
import fc from 'fast-check';
import t from 'tap';
import { InexactNumberError, JSON_DEPTH_MAX, JsonSyntaxError, parseJson, stringifyJson } from './json.js';

t.test('integers beyond 2^53 are parsed exactly as bigint, safe ones as number', async (t) => {
  const cases: [string, number | bigint][] = [
    ['9007199254740991', 9007199254740991],
    ['9007199254740993', 9007199254740993n],
    ['18446744073709551616', 18446744073709551616n],
    ['170141183460469231731687303715884105727', (1n << 127n) - 1n],
    ['170141183460469231731687303715884105728', 1n << 127n],
    ['340282366920938463463374607431768211455', (1n << 128n) - 1n],
    ['340282366920938463463374607431768211456', 1n << 128n],
    ['-170141183460469231731687303715884105728', -(1n << 127n)],
  ];
  for (const [text, want] of cases) t.equal((parseJson(`{"n":${text}}`) as { n: unknown }).n, want, text);
});

t.test('non-integer literals stay numbers, so schemas can refuse them by name', async (t) => {
  t.equal(parseJson('1.5'), 1.5);
  t.equal(parseJson('1e30'), 1e30);
  t.equal(parseJson('-0'), 0);
});

t.test('bigint values are written as bare JSON numbers and round-trip', async (t) => {
  const value = { consumed: 18446744073709551621n, n: 1, list: [(1n << 128n) - 1n] };
  const text = stringifyJson(value);
  t.equal(text, '{"consumed":18446744073709551621,"n":1,"list":[340282366920938463463374607431768211455]}');
  t.same(parseJson(text), value);
});

t.test('malformed JSON and duplicate keys are syntax errors', async (t) => {
  for (const text of ['{"a":1', '{"a":1,"a":2}', '', 'nope', '{"a":01}']) {
    t.throws(() => parseJson(text), JsonSyntaxError, text);
  }
});

t.test('a __proto__ key is an own property, not a prototype', async (t) => {
  const v = parseJson('{"__proto__":{"polluted":true}}') as Record<string, unknown>;
  t.equal(Object.getPrototypeOf(v), Object.prototype);
  t.equal(({} as Record<string, unknown>).polluted, undefined);
});

t.test('nesting is bounded, so no walk of a parsed value can run out of stack', async (t) => {
  const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
  t.doesNotThrow(() => parseJson(nest(JSON_DEPTH_MAX)));
  t.throws(() => parseJson(nest(JSON_DEPTH_MAX + 1)), { name: 'JsonSyntaxError', message: /nested deeper than 64 levels/ });
  t.throws(() => parseJson(nest(100_000)), JsonSyntaxError);
  const value = { s: `${'['.repeat(1000)}\\"{`, t: '\\' };
  t.same(parseJson(JSON.stringify(value)), value, 'brackets, escaped quotes and backslashes in strings do not count');
});

t.test('a duplicate key written with an escape is still a duplicate', async (t) => {
  t.throws(() => parseJson('{"a":1,"\\u0061":2}'), { name: 'JsonSyntaxError', message: /duplicate key "a"/ });
  t.throws(() => parseJson('{"x":{"k":1,"k":2}}'), { name: 'JsonSyntaxError', message: /duplicate key "k"/ });
  t.same(parseJson('{"a":{"a":1},"b":[{"a":1},{"a":2}]}'), { a: { a: 1 }, b: [{ a: 1 }, { a: 2 }] }, 'the same key in different objects is not a duplicate');
  t.same(parseJson('{"a":"k\\",\\"k","k":1}'), { a: 'k","k', k: 1 }, 'keys inside a string value are not keys');
});

t.test('keys and strings holding quotes and backslashes are read where they end', async (t) => {
  // Whether a quote ends a string depends on the run of backslashes before it.
  const text = fc.array(fc.constantFrom('"', '\\', 'a', ':', ',', '{', '}', '\u00e9', '\u0001'), { maxLength: 12 }).map((cs) => cs.join(''));
  const value = fc.oneof(text, fc.integer(), fc.constant(null));
  t.throws(() => parseJson('{"k\\\\":1,"k\\\\":2}'), { name: 'JsonSyntaxError', message: /duplicate key/ }, 'a key ending in an escaped backslash ends at the quote after it');
  t.same(parseJson('{"a\\\\":"\\\\\\"","b":1}'), { 'a\\': '\\"', b: 1 });
  t.doesNotThrow(() => {
    fc.assert(fc.property(fc.dictionary(text, value, { maxKeys: 6 }), fc.array(text, { maxLength: 4 }), (object, list) => {
      const wrapped = { object, list, nested: [object] };
      if (JSON.stringify(parseJson(JSON.stringify(wrapped))) !== JSON.stringify(wrapped)) throw new Error('did not round-trip');
    }));
    fc.assert(fc.property(text, text, text, value, value, (k1, k2, between, v1, v2) => {
      const pair = (k: string, v: unknown) => `${JSON.stringify(k)}:${JSON.stringify(v)}`;
      const doc = (a: string, b: string) => `{${pair(a, v1)},"s":${JSON.stringify(between)},${pair(b, v2)}}`;
      let refused = false;
      try {
        parseJson(doc(k1, k2));
      } catch (err) {
        if (!(err instanceof JsonSyntaxError)) throw err;
        refused = true;
      }
      if (refused !== (k1 === k2 || k1 === 's' || k2 === 's')) throw new Error(`keys ${JSON.stringify(k1)} and ${JSON.stringify(k2)}: refused ${refused}`);
    }), { numRuns: 500 });
  });
});

t.test('long digit runs inside strings and fractions stay what they are', async (t) => {
  t.same(parseJson('{"id":"12345678901234567890","f":0.12345678901234567890}'), { id: '12345678901234567890', f: 0.12345678901234567890 });
  t.equal(parseJson('1e400'), Infinity, 'a literal beyond any double is left to the caller, which refuses it by name');
  t.same(parseJson('[1234567890123456789012, 12345678901234567890.0]'), [1234567890123456789012n, 12345678901234567890], 'an exact integer with a fraction stays the double it reads as, which the schemas refuse beyond 2^53');
});

t.test('a literal a double would round to an integer it is not is refused, never rounded', async (t) => {
  for (const text of ['1.0000000000000000001', '0.99999999999999999999', '100000000000000000001e-20', '10.0000000000000000001e1', '1e-400', '-1e-400', '12345678901234567890.5', '4.9999999999999999']) {
    t.throws(() => parseJson(`{"minor":${text}}`), InexactNumberError, text);
  }
  t.throws(() => parseJson('{"minor":1.0000000000000000001}'), { message: 'the number 1.0000000000000000001 ("minor") is not an integer, though a double rounds it to 1; write numbers as exact integers' });
  t.throws(() => parseJson('[1e-400]'), { message: 'the number 1e-400 is not an integer, though a double rounds it to 0; write numbers as exact integers' }, 'an array index is not named');
  t.ok(new InexactNumberError('x') instanceof JsonSyntaxError, 'callers that answer syntax errors answer it too');
  for (const [text, want] of [['1.0', 1], ['1e5', 100000], ['10.0e1', 100], ['0e-400', 0], ['12.50e1', 125], ['-3.000', -3], ['100e-2', 1]] as const) {
    t.equal(parseJson(text), want, `${text} is exactly ${want}`);
  }
});

t.test('property: an integer written with a fraction or an exponent reads as itself, and one nudged off it is refused', async (t) => {
  fc.assert(fc.property(fc.integer({ min: -(2 ** 40), max: 2 ** 40 }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 1, max: 9 }), (n, shift, nudge) => {
    // n written as digits followed by `shift` zeros, with the exponent -shift: exactly n.
    const exact = n === 0 ? `0e-${shift}` : `${n}${'0'.repeat(shift)}e-${shift}`;
    if (parseJson(exact) !== n && !(n === 0 && Object.is(parseJson(exact), -0))) return false;
    // n plus nudge × 10^-25: 25 and more digits, which no double tells from n (but 0 from 1e-25).
    const nudged = `${n}.${'0'.repeat(24)}${nudge}`;
    if (n === 0) return !Number.isInteger(parseJson(nudged));
    try {
      parseJson(nudged);
      return false;
    } catch (err) {
      return err instanceof InexactNumberError;
    }
  }));
});

t.test('a repeated key is refused in an object of any size, written plainly or with escapes, beside nested objects', async (t) => {
  // Small objects compare keys in place and large ones (or any with an escaped key) use
  // a set: the answer is the same either way, and a nested object's keys never count.
  const key = fc.array(fc.constantFrom('a', 'b', 'é', '"', '\\', '\u0001'), { minLength: 0, maxLength: 3 }).map((cs) => cs.join(''));
  const escaped = (k: string) => `"${[...k].map((ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"`;
  type Member = { key: string; escape: boolean; nested: Member[] | null };
  const member = (nested: fc.Arbitrary<Member[] | null>): fc.Arbitrary<Member> => fc.record({ key, escape: fc.boolean(), nested });
  const inner = fc.array(member(fc.constant(null)), { maxLength: 24 });
  const outer = fc.array(member(fc.option(inner, { freq: 3 })), { maxLength: 40 });
  const write = (o: Member[]): string => `{${o.map((m) => `${m.escape ? escaped(m.key) : JSON.stringify(m.key)}:${m.nested === null ? '1' : write(m.nested)}`).join(',')}}`;
  const repeats = (o: Member[]): boolean => new Set(o.map((m) => m.key)).size !== o.length || o.some((m) => m.nested !== null && repeats(m.nested));
  t.doesNotThrow(() => fc.assert(fc.property(outer, fc.boolean(), (o, inArray) => {
    const text = inArray ? `[${write(o)},{"a":1}]` : write(o);
    let refused = false;
    try {
      parseJson(text);
    } catch (err) {
      if (!(err instanceof JsonSyntaxError)) throw err;
      refused = true;
    }
    if (refused !== repeats(o)) throw new Error(`${text}: refused ${refused}`);
  }), { numRuns: 3000 }));
  t.throws(() => parseJson(`{${Array.from({ length: 40 }, (_, k) => `"k${k}":1`).join(',')},"k7":2}`), { name: 'JsonSyntaxError', message: /duplicate key "k7" at position/ }, 'past the keys compared in place');
  t.throws(() => parseJson('{"ab":1,"b":2,"\\u0061b":3}'), { name: 'JsonSyntaxError', message: /duplicate key "ab"/ }, 'an escaped key after plain ones');
});
