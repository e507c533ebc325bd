/**
 * The SDK's JSON codec: 128-bit integers in and out without losing a digit.
 *
 * `JSON.parse` alone turns 18446744073709551621 into 18446744073709552000. Reading,
 * the reviver takes each number's source text (`context.source`, Node.js 22 and
 * later) and keeps a literal beyond 2^53 as its exact bigint; then the response
 * schema's decode plan (generated from the OpenAPI documents) turns every field the
 * documents mark `format: int128` into a bigint, small values included, so that a
 * counter is always a bigint and never sometimes a number. Writing, a bigint becomes
 * a bare JSON number (`JSON.rawJSON`), never a string.
 *
 * The server has its own codec (packages/core); the SDK installs alone and imports
 * nothing of the project, so it carries this small one.
 */

/**
 * A decode plan: 'int' marks a 128-bit integer (or a union holding one); `p` names
 * an object's properties, `a` stands for its other properties, `i` for an array's
 * items. Subtrees without such an integer are left out.
 */
export type Plan = 'int' | { readonly p?: { readonly [key: string]: Plan }; readonly a?: Plan; readonly i?: Plan };

type ReviverContext = { source?: string };
type JsonWithRaw = typeof JSON & { rawJSON(text: string): unknown };

const INTEGER_LITERAL = /^-?(0|[1-9][0-9]*)$/;

/** Whether this runtime gives revivers the source text, without which 128-bit integers cannot be read exactly. */
export function hasJsonSourceText(): boolean {
  let seen: unknown;
  JSON.parse('1', (_k: string, v: unknown, context?: ReviverContext) => {
    seen = context?.source;
    return v;
  });
  return seen === '1' && typeof (JSON as Partial<JsonWithRaw>).rawJSON === 'function';
}

/** Throws, saying what to run instead, on a runtime that would round 128-bit integers. */
export function assertRuntime(): void {
  if (!hasJsonSourceText()) {
    throw new Error(`Node.js ${process.version} cannot read or write JSON integers beyond 2^53 exactly (JSON.parse source text and JSON.rawJSON need Node.js 22 or later); use Node.js 22 or 24.`);
  }
}

function exactIntegers(_key: string, value: unknown, context?: ReviverContext): unknown {
  if (typeof value !== 'number' || Number.isSafeInteger(value)) return value;
  const source = context?.source;
  return source !== undefined && INTEGER_LITERAL.test(source) ? BigInt(source) : value;
}

/** Parses JSON text; an integer literal beyond 2^53 becomes its exact bigint. */
export function parseJson(text: string): unknown {
  return JSON.parse(text, exactIntegers as (k: string, v: unknown) => unknown);
}

function rawBigints(key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return (JSON as JsonWithRaw).rawJSON(value.toString());
  // Such a number may already be another one (9007199254740993 reads as ...992): sending
  // it would have the ledger record an amount the caller never meant.
  if (typeof value === 'number' && Number.isInteger(value) && !Number.isSafeInteger(value)) {
    throw new RangeError(`${key === '' ? 'The value' : `"${key}"`} is an integer beyond 2^53 (${BigInt(value)} as the number holds it), which a JavaScript number does not hold exactly: give it as a bigint.`);
  }
  return value;
}

/** Serializes to JSON; a bigint is written as a bare JSON number, and an integer number beyond 2^53 is refused (RangeError). */
export function stringifyJson(value: unknown, indent?: number): string {
  const text = JSON.stringify(value, rawBigints, indent);
  if (text === undefined) throw new TypeError('the value has no JSON form');
  return text;
}

/**
 * Turns the integers `plan` marks into bigints, in place, and returns the value.
 * A marked value that is not an integer (a string of a union, say) is left as it is.
 */
export function decodeWith<T>(value: unknown, plan: Plan | undefined): T {
  if (plan === undefined || value === null || typeof value !== 'object') return value as T;
  if (Array.isArray(value)) {
    if (typeof plan === 'object' && plan.i !== undefined) {
      for (let k = 0; k < value.length; k++) value[k] = convert(value[k], plan.i);
    }
    return value as T;
  }
  if (typeof plan !== 'object') return value as T;
  const o = value as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    const sub = plan.p?.[key] ?? plan.a;
    if (sub !== undefined) o[key] = convert(o[key], sub);
  }
  return value as T;
}

function convert(v: unknown, plan: Plan): unknown {
  if (plan === 'int') return typeof v === 'number' && Number.isInteger(v) ? BigInt(v) : v;
  return decodeWith(v, plan);
}
