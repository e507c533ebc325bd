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
  return { ok: false, issues: r.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })) };
}
