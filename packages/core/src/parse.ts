/**
 * Parsing with the error texts the ledger answers with. Schema-specific messages
 * win; the fallbacks below replace zod's generic ones for the common cases.
 */
import { z } from 'zod';

const errorMap: z.core.$ZodErrorMap = (iss) => {
  if (iss.code === 'invalid_type' && iss.input === undefined) return 'is required';
  if (iss.code === 'unrecognized_keys') {
    return `unknown field${iss.keys.length > 1 ? 's' : ''} ${iss.keys.map((k) => JSON.stringify(k)).join(', ')}`;
  }
  if (iss.code === 'invalid_type') return `must be ${article(iss.expected)}`;
  if (iss.code === 'invalid_key') return iss.issues[0]?.message ?? 'is not a valid name';
  // Lengths in the ledger's words rather than the library's ("Too big: expected string to have <=4096 characters").
  if (iss.code === 'too_big' && (iss.origin === 'string' || iss.origin === 'array')) {
    return `must have at most ${iss.inclusive === false ? Number(iss.maximum) - 1 : iss.maximum} ${iss.origin === 'string' ? 'characters' : 'items'}`;
  }
  if (iss.code === 'too_small' && (iss.origin === 'string' || iss.origin === 'array')) {
    const least = iss.inclusive === false ? Number(iss.minimum) + 1 : Number(iss.minimum);
    if (least === 1) return iss.origin === 'string' ? 'must not be empty' : 'must have at least one item';
    return `must have at least ${least} ${iss.origin === 'string' ? 'characters' : 'items'}`;
  }
  return undefined;
};

function article(expected: string): string {
  return /^[aeiou]/.test(expected) ? `an ${expected}` : `a ${expected}`;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; issues: { path: string; message: string }[] };

/** Parses `input` with `schema`; on failure lists every problem with its dotted path. */
export function parseWith<S extends z.ZodType>(schema: S, input: unknown): Parsed<z.output<S>> {
  const r = schema.safeParse(input, { error: errorMap });
  if (r.success) return { ok: true, value: r.data };
  return { ok: false, issues: r.error.issues.map((i) => ({ path: issuePath(i.path), message: i.message })) };
}

/**
 * A UTF-16 surrogate without its pair: no Unicode text holds one, and UTF-8 has no form
 * for it (text hashed as UTF-8 would hash it as U+FFFD, so that two texts had one hash).
 */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/**
 * The dotted path of an issue. A name that holds a lone surrogate (the issue may be
 * that it does) is written with the surrogate as the text of its escape (`\ud800`):
 * the error's body is JSON, and a lone surrogate in it would make the whole answer
 * unreadable to a strict parser, which is the very thing the issue says.
 */
export function issuePath(path: readonly PropertyKey[]): string {
  const text = path.map(String).join('.');
  return !LONE_SURROGATE.test(text) ? text : text.replace(LONE_SURROGATES, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}
