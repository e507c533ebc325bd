/**
 * Verifying an exported log: the NDJSON of `GET /admin/v1/log/export`, one
 * `{index, op, result, entry_hash}` record per operation that took effect. The
 * verifier re-applies every operation to an empty ledger and checks that each
 * recomputed result and chain link equals the recorded one, and that indexes
 * increase. Its answer is the digest and state hash the log leads to, which an
 * auditor compares with what the node reports (`GET /admin/v1/log/digest`).
 */
import { apply, createLedger } from './apply.js';
import { canonicalJson } from './canonical.js';
import { parseJson } from './json.js';
import { parseOperation } from './ops.js';
import { stateHash } from './snapshot.js';

export type Verified =
  | { ok: true; records: number; applied: number; digest: string; state_hash: string }
  | { ok: false; line: number; reason: string };

export function verifyExport(ndjson: string): Verified {
  const ledger = createLedger();
  const lines = ndjson.split('\n').filter((l) => l.trim() !== '');
  for (const [k, text] of lines.entries()) {
    const line = k + 1;
    let record: { index?: unknown; op?: unknown; result?: unknown; entry_hash?: unknown };
    try {
      record = parseJson(text) as typeof record;
    } catch (err) {
      return { ok: false, line, reason: `not JSON: ${(err as Error).message}` };
    }
    const index = typeof record.index === 'bigint' ? Number(record.index) : record.index;
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index <= ledger.applied) {
      return { ok: false, line, reason: `index ${String(record.index)} does not follow ${ledger.applied}` };
    }
    const op = parseOperation(record.op);
    if (!op.ok) return { ok: false, line, reason: `not an operation: ${op.issues.map((i) => `${i.path} ${i.message}`).join('; ')}` };
    const a = apply(ledger, index, op.value);
    if (canonicalJson(a.result) !== canonicalJson(record.result)) return { ok: false, line, reason: `the recorded result of index ${index} is not what the operation gives` };
    if (a.entry_hash === null) return { ok: false, line, reason: `the operation at index ${index} took no effect and has no place in the log` };
    if (a.entry_hash !== record.entry_hash) return { ok: false, line, reason: `the chain breaks at index ${index}` };
  }
  return { ok: true, records: lines.length, applied: ledger.applied, digest: ledger.head, state_hash: stateHash(ledger.state) };
}
