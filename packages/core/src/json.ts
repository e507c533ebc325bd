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

/** Parses JSON text without losing integer precision. Throws `JsonSyntaxError`. */
export function parseJson(text: string): unknown {
  try {
    return parse(text, null, parseNumber);
  } catch (err) {
    throw new JsonSyntaxError(err instanceof Error ? err.message : String(err));
  }
}

/** Serializes a value to JSON; `bigint` values are written as bare numbers. */
export function stringifyJson(value: unknown, indent?: number): string {
  const text = stringify(value, null, indent);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}
