/**
 * What a consumer of the change feed asks for (`GET /admin/v1/feed?from=&type=&verdict=`)
 * and how a journal record is matched against it. The records are the export's:
 * `{entry_hash, index, op, result}` as canonical JSON, one per operation that took
 * effect, written by apply-batch.ts.
 */
import { z } from 'zod';
import { REQUIRED_ROLES, parseJson, type OperationType, type Verdict } from '@apl/core';

const ADMIN_TYPES = Object.keys(REQUIRED_ROLES) as OperationType[];
export const OPERATION_TYPES: readonly OperationType[] = ['SubmitIntent', 'Tick', ...ADMIN_TYPES];

/** Short names a consumer may use for a group of operation types. */
export const TYPE_GROUPS: Record<string, readonly OperationType[]> = {
  intent: ['SubmitIntent'],
  tick: ['Tick'],
  admin: ADMIN_TYPES,
};

export const VERDICTS = ['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected'] as const satisfies readonly Verdict[];

const INDEX_PHRASE = 'must be a log index: an integer from 0 to 9007199254740991';
const TYPE_NAMES = [...Object.keys(TYPE_GROUPS), ...OPERATION_TYPES];

/** A comma-separated list whose every item is one of `allowed`. */
const list = <T extends string>(allowed: readonly T[], what: string) => {
  const phrase = `must be ${what}, separated by commas: ${allowed.join(', ')}`;
  return z.string({ error: phrase })
    .transform((s) => s.split(','))
    .pipe(z.array(z.enum(allowed as [T, ...T[]], { error: phrase })).min(1, phrase));
};

export const FeedQuery = z.strictObject({
  from: z.string({ error: INDEX_PHRASE }).regex(/^\d{1,16}$/, INDEX_PHRASE).transform(Number)
    .refine(Number.isSafeInteger, INDEX_PHRASE).optional(),
  type: list(TYPE_NAMES, 'operation types or intent, tick, admin').optional(),
  verdict: list(VERDICTS, 'verdicts').optional(),
});
export type FeedQuery = z.output<typeof FeedQuery>;

/** Which records a feed carries: null means no restriction on that field. */
export interface FeedFilter {
  types: ReadonlySet<OperationType> | null;
  verdicts: ReadonlySet<Verdict> | null;
}

export function filterOf(q: FeedQuery): FeedFilter {
  return {
    types: q.type === undefined ? null : new Set(q.type.flatMap((t) => TYPE_GROUPS[t] ?? [t as OperationType])),
    verdicts: q.verdict === undefined ? null : new Set(q.verdict),
  };
}

/**
 * The log index of a journal record, read from its canonical text, where
 * `entry_hash` (64 hex digits) always comes first and `index` second.
 */
export function recordIndex(line: string): number {
  const m = /^\{"entry_hash":"[0-9a-f]{64}","index":(\d+),/.exec(line);
  // The journal holds only records apply-batch.ts wrote; anything else is a bug.
  if (!m) throw new Error(`a journal record does not start with its entry hash and index: ${line.slice(0, 120)}`);
  return Number(m[1]);
}

/** Whether a journal record passes the filter; a verdict filter passes only judged intents. */
export function matches(filter: FeedFilter, line: string): boolean {
  if (filter.types === null && filter.verdicts === null) return true;
  const r = parseJson(line) as { op: { type: OperationType }; result: { value?: { outcome?: { verdict?: Verdict } } } };
  if (filter.types !== null && !filter.types.has(r.op.type)) return false;
  if (filter.verdicts === null) return true;
  const verdict = r.result.value?.outcome?.verdict;
  return verdict !== undefined && filter.verdicts.has(verdict);
}
