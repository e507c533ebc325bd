/**
 * The lossless JSON codec of the wire and of the log.
 *
 * `JSON.parse` alone turns 18446744073709551621 into 18446744073709552000. Amounts and
 * counters are 128-bit, so every JSON text the ledger reads goes through `parseJson`:
 * an integer literal outside the safe range becomes a `bigint`, a safe one stays a
 * `number`, and the schemas decide what a field accepts. It is V8's own parser with
 * source-text access in the reviver (`context.source`, Node.js 22 and later), which
 * reads such a literal's digits exactly. A text with no number literal of 16 digits
 * or more cannot hold one, and is parsed without a reviver at all (twice as fast).
 *
 * Before parsing, one linear scan refuses what `JSON.parse` would accept but the
 * ledger does not: nesting deeper than JSON_DEPTH_MAX, and duplicate object keys
 * (`JSON.parse` keeps the last one silently; two parsers could read such a text
 * differently). A `__proto__` key becomes an own property, never a prototype.
 * `stringifyJson` writes a `bigint` as a bare JSON number (`JSON.rawJSON`).
 */

const INTEGER_LITERAL = /^-?(0|[1-9][0-9]*)$/;
/** The shortest integer literal beyond the safe range (2^53) has 16 digits. */
const SAFE_DIGITS_MAX = 15;

/** A JSON text that could not be parsed; `message` says where. */
export class JsonSyntaxError extends Error {
  override readonly name = 'JsonSyntaxError';
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
 * its exact bigint. A runtime that gives no source text (before Node.js 22) could only
 * round it, so it throws instead: money is never silently rounded.
 */
function exactIntegers(_key: string, value: unknown, context?: ReviverContext): unknown {
  if (typeof value !== 'number' || Number.isSafeInteger(value)) return value;
  const source = context?.source;
  if (source === undefined) throw new Error('this runtime cannot read JSON numbers beyond 2^53 exactly (JSON.parse gives no source text before Node.js 22)');
  return INTEGER_LITERAL.test(source) ? BigInt(source) : value;
}

/** Parses JSON text without losing integer precision. Throws `JsonSyntaxError`. */
export function parseJson(text: string): unknown {
  const longNumbers = checkStructure(text);
  if (!longNumbers) return parseSyntax(text);
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
 * Refuses text whose arrays and objects nest deeper than JSON_DEPTH_MAX, or whose
 * objects repeat a key, in one pass and without recursion; returns whether a number
 * literal outside the strings has more than SAFE_DIGITS_MAX digits. Anything else
 * malformed is left to the parser. `keys[d]` holds the keys seen in the object open
 * at depth d (null for an array); `expectKey` is true where the next string is a key.
 */
function checkStructure(text: string): boolean {
  const keys: (Set<string> | null)[] = [];
  let expectKey = false;
  let digits = 0;
  let longNumbers = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) {
      if (++digits > SAFE_DIGITS_MAX) longNumbers = true;
      continue;
    }
    digits = 0;
    if (c === 0x22) {
      const end = stringEnd(text, i);
      if (expectKey) {
        const seen = keys[keys.length - 1]!;
        const key = keyOf(text, i, end);
        if (seen.has(key)) throw new JsonSyntaxError(`duplicate key ${JSON.stringify(key)} at position ${i}`);
        seen.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      if (keys.length >= JSON_DEPTH_MAX) throw new JsonSyntaxError(`JSON nested deeper than ${JSON_DEPTH_MAX} levels at position ${i}`);
      keys.push(c === 0x7b ? new Set() : null);
      expectKey = c === 0x7b;
    } else if (c === 0x7d || c === 0x5d) {
      keys.pop();
      expectKey = false;
    } else if (c === 0x2c) {
      expectKey = keys.length > 0 && keys[keys.length - 1] !== null;
    }
  }
  return longNumbers;
}

/** The index of the quote that closes the string opening at `start` (or the text's end). */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++; // a backslash escapes the next character
    else if (c === 0x22) return i;
  }
  return text.length;
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
