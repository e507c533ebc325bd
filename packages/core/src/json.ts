/**
 * The lossless JSON codec of the wire and of the log.
 *
 * `JSON.parse` alone turns 18446744073709551621 into 18446744073709552000. Amounts and
 * counters are 128-bit, so every JSON text the ledger reads goes through `parseJson`:
 * an integer literal outside the safe range becomes a `bigint`, a safe one stays a
 * `number`, and the schemas decide what a field accepts. It is V8's own parser with
 * source-text access in the reviver (`context.source`, Node.js 22 and later), which
 * reads such a literal's digits exactly. The reviver also refuses a literal with a
 * fraction or an exponent that a double rounds to an integer it is not
 * (`1.0000000000000000001`, `1e-400`): the ledger's numbers are integers, and one
 * must never become another by rounding. A text with no number literal of 16 digits
 * or more, and none with a fraction or an exponent, cannot hold either, and is parsed
 * without a reviver at all (twice as fast).
 *
 * Before parsing, one linear scan refuses what `JSON.parse` would accept but the
 * ledger does not: nesting deeper than JSON_DEPTH_MAX, and duplicate object keys
 * (`JSON.parse` keeps the last one silently; two parsers could read such a text
 * differently). A `__proto__` key becomes an own property, never a prototype.
 * `stringifyJson` writes a `bigint` as a bare JSON number (`JSON.rawJSON`).
 */

const INTEGER_LITERAL = /^-?(0|[1-9][0-9]*)$/;
/** A JSON number literal's sign, integer digits, fraction digits and exponent. */
const NUMBER_PARTS = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/;
/** The shortest integer literal beyond the safe range (2^53) has 16 digits. */
const SAFE_DIGITS_MAX = 15;

/** A JSON text that could not be parsed; `message` says where. */
export class JsonSyntaxError extends Error {
  override readonly name: string = 'JsonSyntaxError';
}

/** A number literal that has no exact value the ledger could read: a double would round it to an integer it is not. */
export class InexactNumberError extends JsonSyntaxError {
  override readonly name = 'InexactNumberError';
}

/**
 * How deeply JSON may nest. Every record of the ledger is far shallower (a policy
 * bundle is about ten levels); the bound keeps the recursive walks that follow a
 * parse (validation, canonical encoding) from running out of stack.
 */
export const JSON_DEPTH_MAX = 64;

type ReviverContext = { source?: string };

/**
 * The reviver: a number beyond the safe range that was written as an integer becomes
 * its exact bigint. One written with a fraction or an exponent stays the double it
 * reads as (the schemas refuse a non-integer, or one beyond the safe range, where an
 * integer is due), unless the double is an integer the literal is not: that throws.
 * A runtime that gives no source text (before Node.js 22) could only round, so it
 * throws instead: money is never silently rounded.
 */
function exactIntegers(key: string, value: unknown, context?: ReviverContext): unknown {
  if (typeof value !== 'number') return value;
  const source = context?.source;
  if (source === undefined) {
    if (Number.isSafeInteger(value)) return value;
    throw new Error('this runtime cannot read JSON numbers beyond 2^53 exactly (JSON.parse gives no source text before Node.js 22)');
  }
  if (INTEGER_LITERAL.test(source)) return Number.isSafeInteger(value) ? value : BigInt(source);
  if (Number.isInteger(value) && integerValue(source) === null) {
    throw new InexactNumberError(`the number ${source}${/^[0-9]+$/.test(key) ? '' : ` (${JSON.stringify(key)})`} is not an integer, though a double rounds it to ${value}; write numbers as exact integers`);
  }
  return value;
}

/**
 * The integer a number literal with a fraction or an exponent denotes exactly, or
 * null when it denotes none (`1.5`, `1.0000000000000000001`, `1e-400`). Only called
 * for a literal a double reads as a finite integer, so its exponent is small.
 */
function integerValue(source: string): bigint | null {
  const m = NUMBER_PARTS.exec(source);
  if (m === null) return null;
  const [, sign, whole, fraction = '', exponent = '0'] = m;
  const digits = (whole! + fraction).replace(/^0+/, '');
  if (digits === '') return 0n;
  // The value is digits × 10^scale.
  const scale = Number(exponent) - fraction.length;
  if (scale >= 0) return BigInt(`${sign}${digits}`) * 10n ** BigInt(scale);
  const kept = digits.length + scale;
  if (kept <= 0 || !/^0*$/.test(digits.slice(kept))) return null;
  return BigInt(`${sign}${digits.slice(0, kept)}`);
}

/** Parses JSON text without losing integer precision. Throws `JsonSyntaxError`. */
export function parseJson(text: string): unknown {
  if (!checkStructure(text)) return parseSyntax(text);
  return parseSyntax(text, exactIntegers as (k: string, v: unknown) => unknown);
}

/** JSON.parse with its syntax errors as JsonSyntaxError; the reviver's own errors pass through. */
function parseSyntax(text: string, reviver?: (k: string, v: unknown) => unknown): unknown {
  try {
    return JSON.parse(text, reviver);
  } catch (err) {
    if (err instanceof SyntaxError) throw new JsonSyntaxError(err.message);
    throw err;
  }
}

/**
 * An object with at most this many keys, none written with an escape, is checked for
 * duplicates by comparing the keys' text in place: no key is copied out of the text
 * and no set is built, which made this scan cost more than the parse itself. A larger
 * object, or one with an escaped key, is checked with a set of its decoded keys, so
 * that many keys of one length cost a lookup each, not a comparison with every other.
 */
const KEYS_COMPARED_MAX = 16;

/**
 * Refuses text whose arrays and objects nest deeper than JSON_DEPTH_MAX, or whose
 * objects repeat a key, in one pass and without recursion; returns whether the text
 * needs the reviver: a number literal outside the strings with more than
 * SAFE_DIGITS_MAX digits, a fraction or an exponent. Anything else malformed is left
 * to the parser.
 *
 * `open[d]` is, for the object or array open at depth d, where its keys' spans begin
 * in `spans` (an array: -1). `spans` holds `[start, end)` of each raw key of the open
 * objects that compare in place, innermost last; `sets[d]` holds the decoded keys of
 * an object checked with a set. `expectKey` is true where the next string is a key.
 */
function checkStructure(text: string): boolean {
  const open: number[] = [];
  const spans: number[] = [];
  const sets: (Set<string> | undefined)[] = [];
  let expectKey = false;
  let digits = 0;
  let revive = false;
  let backslash = text.indexOf('\\');
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) {
      if (++digits > SAFE_DIGITS_MAX) revive = true;
      continue;
    }
    // A fraction or an exponent (outside strings, `.`, `e` and `E` follow a digit only in a number).
    if (digits > 0 && (c === 0x2e || c === 0x65 || c === 0x45)) revive = true;
    digits = 0;
    if (c === 0x22) {
      if (backslash >= 0 && backslash < i) backslash = text.indexOf('\\', i);
      const end = stringEnd(text, i, backslash);
      if (expectKey) {
        addKey(text, i, end, open[open.length - 1]!, spans, sets, open.length - 1);
        expectKey = false;
      }
      i = end < 0 ? -end : end;
    } else if (c === 0x7b || c === 0x5b) {
      if (open.length >= JSON_DEPTH_MAX) throw new JsonSyntaxError(`JSON nested deeper than ${JSON_DEPTH_MAX} levels at position ${i}`);
      open.push(c === 0x7b ? spans.length : -1);
      expectKey = c === 0x7b;
    } else if (c === 0x7d || c === 0x5d) {
      const base = open.pop();
      if (base !== undefined && base >= 0) spans.length = base;
      sets[open.length] = undefined;
      expectKey = false;
    } else if (c === 0x2c) {
      expectKey = open.length > 0 && open[open.length - 1]! >= 0;
    }
  }
  return revive;
}

/**
 * Records the key whose string opens at `start` and closes at `end` (negative: it holds
 * a backslash, and closes at -end) in the object open at `depth`, whose spans begin at
 * `base`; throws if the object already has it.
 */
function addKey(text: string, start: number, end: number, base: number, spans: number[], sets: (Set<string> | undefined)[], depth: number): void {
  let set = sets[depth];
  if (set === undefined) {
    if (end > 0 && spans.length - base < 2 * KEYS_COMPARED_MAX) {
      const from = start + 1;
      const length = end - from;
      for (let s = base; s < spans.length; s += 2) {
        if (spans[s + 1]! - spans[s]! === length && sameText(text, spans[s]!, from, length)) duplicate(text, start, end);
      }
      spans.push(from, end);
      return;
    }
    set = new Set();
    for (let s = base; s < spans.length; s += 2) set.add(text.slice(spans[s]!, spans[s + 1]!));
    spans.length = base;
    sets[depth] = set;
  }
  const key = keyOf(text, start, end < 0 ? -end : end);
  if (set.has(key)) duplicate(text, start, end);
  set.add(key);
}

function duplicate(text: string, start: number, end: number): never {
  throw new JsonSyntaxError(`duplicate key ${JSON.stringify(keyOf(text, start, end < 0 ? -end : end))} at position ${start}`);
}

/** Whether the `length` characters of `text` at `a` and at `b` are the same. */
function sameText(text: string, a: number, b: number, length: number): boolean {
  for (let k = 0; k < length; k++) if (text.charCodeAt(a + k) !== text.charCodeAt(b + k)) return false;
  return true;
}

/**
 * The index of the quote that closes the string opening at `start` (or the text's
 * end), negated when the string holds a backslash (an escape). `backslash` is the
 * first backslash at or after `start` (-1: none), so that a string without one is
 * found by `indexOf`, which V8 runs far faster than a loop over its characters.
 */
function stringEnd(text: string, start: number, backslash: number): number {
  const quote = text.indexOf('"', start + 1);
  if (quote >= 0 && (backslash < 0 || backslash > quote)) return quote;
  let escaped = false;
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) {
      i++; // a backslash escapes the next character
      escaped = true;
    } else if (c === 0x22) return escaped ? -i : i;
  }
  return escaped ? -text.length : text.length;
}

/** A key as the parser will read it: escapes decoded, so "a" and "\u0061" are one key. */
function keyOf(text: string, start: number, end: number): string {
  const raw = text.slice(start + 1, end);
  if (!raw.includes('\\')) return raw;
  try {
    return JSON.parse(text.slice(start, end + 1)) as string;
  } catch {
    return raw; // malformed; the parser will say where
  }
}

function bigintsRaw(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON(value.toString()) : value;
}

/** Serializes a value to JSON; `bigint` values are written as bare numbers. */
export function stringifyJson(value: unknown, indent?: number): string {
  const text = JSON.stringify(value, bigintsRaw, indent);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}
