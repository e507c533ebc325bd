/**
 * The lossless JSON codec of the wire and of the log.
 *
 * `JSON.parse` turns 18446744073709551621 into 18446744073709552000. Amounts and
 * counters are 128-bit, so every JSON text the ledger reads goes through `parseJson`:
 * an integer literal outside the safe range becomes a `bigint`, a safe one stays a
 * `number`, and the schemas decide what a field accepts. `stringifyJson` writes a
 * `bigint` as a bare JSON number. Duplicate object keys are a syntax error.
 */
import { parse, stringify } from 'lossless-json';

const INTEGER_LITERAL = /^-?(0|[1-9][0-9]*)$/;

function parseNumber(text: string): number | bigint {
  if (INTEGER_LITERAL.test(text)) {
    const n = Number(text);
    return Number.isSafeInteger(n) ? n : BigInt(text);
  }
  return Number(text);
}

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

/** Parses JSON text without losing integer precision. Throws `JsonSyntaxError`. */
export function parseJson(text: string): unknown {
  checkDepth(text);
  try {
    return parse(text, null, parseNumber);
  } catch (err) {
    throw new JsonSyntaxError(err instanceof Error ? err.message : String(err));
  }
}

/** Refuses text whose arrays and objects nest deeper than JSON_DEPTH_MAX, without recursion. */
function checkDepth(text: string): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > JSON_DEPTH_MAX) throw new JsonSyntaxError(`JSON nested deeper than ${JSON_DEPTH_MAX} levels at position ${i}`);
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
}

/** Serializes a value to JSON; `bigint` values are written as bare numbers. */
export function stringifyJson(value: unknown, indent?: number): string {
  const text = stringify(value, null, indent);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}
