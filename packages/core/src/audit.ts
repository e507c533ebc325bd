/**
 * Verifying an exported log: the NDJSON of `GET /admin/v1/log/export`, one
 * `{index, op, result, entry_hash}` record per operation that took effect, each line
 * the canonical JSON of its record (canonical.ts) and nothing else. The verifier
 * checks that each line is, re-applies every operation to an empty ledger and checks
 * that each recomputed result and chain link equals the recorded one, and that
 * indexes increase. Its answer is the digest and state hash the log leads to, which an
 * auditor compares with what the node reports (`GET /admin/v1/log/digest`).
 *
 * `ExportVerifier` takes the records one line at a time, so an export of any length
 * is verified as it streams in, without holding it; `verifyExport` is the same over
 * a whole text.
 */
import { canonicalJson } from './canonical.js';
import { parseJson } from './json.js';
import { MemoryStore } from './memory-store.js';
import { parseOperation } from './ops.js';

export type Verified =
  | { ok: true; records: number; applied: number; digest: string; state_hash: string }
  | { ok: false; line: number; reason: string };

export type LineCheck = { ok: true } | { ok: false; line: number; reason: string };

/** The fields of an exported record, and no others. */
const RECORD_KEYS = new Set(['entry_hash', 'index', 'op', 'result']);

export class ExportVerifier {
  private readonly store = new MemoryStore();
  /** line is the number of the last line pushed. */
  private line = 0;
  private records = 0;
  private failure: { ok: false; line: number; reason: string } | null = null;

  /** Checks the next line of the export; once one fails, every later push answers that failure. */
  push(text: string): LineCheck {
    if (this.failure) return this.failure;
    this.line++;
    const reason = this.check(text);
    if (reason === null) {
      this.records++;
      return { ok: true };
    }
    this.failure = { ok: false, line: this.line, reason };
    return this.failure;
  }

  /** The verdict on everything pushed: the digest and state hash it leads to, or the first failure. */
  result(): Verified {
    if (this.failure) return this.failure;
    const m = this.store.meta;
    return { ok: true, records: this.records, applied: m.applied, digest: m.head, state_hash: m.stateHash };
  }

  private check(text: string): string | null {
    // One file, one verdict: a byte the export does not write is refused, never skipped.
    if (text === '') return 'an empty line: an export has one record on every line';
    if (text.endsWith('\r')) return 'the line ends with a carriage return: an export\'s lines end with a line feed alone';
    let record: { index?: unknown; op?: unknown; result?: unknown; entry_hash?: unknown };
    try {
      record = parseJson(text) as typeof record;
    } catch (err) {
      return `not JSON: ${(err as Error).message}`;
    }
    if (record === null || typeof record !== 'object' || Array.isArray(record)) return 'not a record: a line is an object {entry_hash, index, op, result}';
    // Only these four are covered: the chain links the operation and its result, and the
    // index orders them. Anything else on the line would pass unverified.
    const extra = Object.keys(record).filter((k) => !RECORD_KEYS.has(k));
    if (extra.length > 0) return `not a record: ${extra.map((k) => JSON.stringify(k)).join(', ')} ${extra.length === 1 ? 'is not a field' : 'are not fields'} of a record (entry_hash, index, op, result)`;
    const missing = [...RECORD_KEYS].filter((k) => !(k in record));
    if (missing.length > 0) return `not a record: ${missing.map((k) => JSON.stringify(k)).join(', ')} ${missing.length === 1 ? 'is' : 'are'} missing`;
    if (typeof record.entry_hash !== 'string') return `not a record: "entry_hash" is ${shown(record.entry_hash)}, not a hash`;
    const canonical = canonicalJson(record);
    if (canonical !== text) return `not canonical JSON: it differs from the canonical encoding of its record at character ${firstDifference(canonical, text) + 1}`;
    const applied = this.store.meta.applied;
    const index = typeof record.index === 'bigint' ? Number(record.index) : record.index;
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 1) {
      return `not a record: "index" is ${shown(record.index)}, not a log index (an integer from 1 to ${Number.MAX_SAFE_INTEGER})`;
    }
    if (index <= applied) return `index ${index} does not follow ${applied}`;
    const op = parseOperation(record.op);
    if (!op.ok) return `not an operation: ${op.issues.map((i) => (i.path === '' ? i.message : `${i.path} ${i.message}`)).join('; ')}`;
    const a = this.store.apply(index, op.value);
    if (canonicalJson(a.result) !== canonicalJson(record.result)) return `the recorded result of index ${index} is not what the operation gives`;
    if (a.entry_hash === null) return `the operation at index ${index} took no effect and has no place in the log`;
    if (a.entry_hash !== record.entry_hash) return `the chain breaks at index ${index}`;
    return null;
  }
}

/** A JSON value as a message quotes it: its canonical JSON, cut at 40 characters. */
function shown(value: unknown): string {
  const text = canonicalJson(value);
  return text.length <= 40 ? text : `${text.slice(0, 40)}...`;
}

/** The position of the first character where `a` and `b` differ (the shorter's length when one begins the other). */
function firstDifference(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** Verifies a whole export: its lines end with a line feed (the last one's may be left off). */
export function verifyExport(ndjson: string): Verified {
  const v = new ExportVerifier();
  const lines = ndjson.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  for (const line of lines) if (!v.push(line).ok) break;
  return v.result();
}
