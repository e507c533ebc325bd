/**
 * `apply`: the one entry point of the state machine. Given a view of the state store
 * and the next committed operation with its log index, it judges the operation,
 * writes to the view (or not), returns the result, and, when the operation took
 * effect, extends the hash chain:
 *
 *   entry_hash = sha256(prev_hash || canonical(op) || canonical(result))
 *
 * where prev_hash is the raw 32 bytes of the previous link (32 zero bytes for the
 * first) and canonical() is the RFC 8785 form. An operation takes effect when it
 * records something: a judged intent (posted or refused), a tick, a successful
 * administrative change. A refusal before judgement (an error) and the replay of a
 * recorded transaction change nothing, so they leave no link: the ledger, its
 * digest and its export are exactly what took effect. The head of the chain is the
 * ledger digest; an auditor can re-run an exported log and compare it.
 *
 * Nothing here reads a clock, draws a random number or performs I/O. The same
 * sequence of operations gives the same results, states and digests everywhere.
 */
import { createHash } from 'node:crypto';
import { applyAdmin, type AdminValue } from './admin.js';
import { canonicalJson } from './canonical.js';
import { assert, ok, type Result } from './errors.js';
import { applyIntent, type IntentResult } from './intent.js';
import { sweepDeadlines, type Breach } from './obligations.js';
import type { Operation } from './ops.js';
import { State } from './state.js';
import type { View } from './store.js';

export const GENESIS_HASH = '0'.repeat(64);

export type TickValue = { tick: number; breaches: Breach[] };
export type OpValue = IntentResult | TickValue | AdminValue;
export type OpResult = Result<OpValue>;

export interface Applied {
  index: number;
  result: OpResult;
  /** entry_hash is the chain link of an operation that took effect; null for one that did not. */
  entry_hash: string | null;
  /**
   * result_text is the canonical JSON of `result` that the link hashed, for the journal
   * to reuse; null for an operation that did not take effect.
   */
  result_text: string | null;
}

/**
 * Applies the operation committed at `index` to the view, whose records `reads`
 * named and the store loaded. `opText`, when given, is the operation's canonical JSON
 * (the bytes of its log entry), so that it is not encoded again for the chain.
 * Invariant: indexes strictly increase.
 */
export function apply(view: View, index: number, op: Operation, opText?: string): Applied {
  assert(Number.isSafeInteger(index) && index > view.meta.applied, `log index ${index} follows ${view.meta.applied}`);
  const state = new State(view);
  const result = dispatch(state, index, op);
  view.meta.applied = index;
  if (!tookEffect(result)) return { index, result, entry_hash: null, result_text: null };
  const result_text = canonicalJson(result);
  const entry_hash = link(view.meta.head, opText ?? canonicalJson(op), result_text);
  if (op.type === 'SubmitIntent' && result.ok && 'kind' in result.value && result.value.kind === 'recorded') {
    state.sealRecorded(index, entry_hash);
  }
  view.meta.head = entry_hash;
  return { index, result, entry_hash, result_text };
}

/** Moves the view past a log entry that is no operation (a new leader's no-op). */
export function skip(view: View, index: number): void {
  assert(Number.isSafeInteger(index) && index > view.meta.applied, `log index ${index} follows ${view.meta.applied}`);
  view.meta.applied = index;
}

/** Whether an operation's result records anything (see the chain rule above). */
export function tookEffect(result: OpResult): boolean {
  return result.ok && !('kind' in result.value && result.value.kind === 'replayed');
}

function dispatch(state: State, index: number, op: Operation): OpResult {
  switch (op.type) {
    case 'SubmitIntent':
      return applyIntent(state, op, index);
    case 'Tick':
      state.tick += 1;
      return ok({ tick: state.tick, breaches: sweepDeadlines(state) });
    default:
      return applyAdmin(state, op, index);
  }
}

/** One link of the hash chain; `op` is the operation's canonical JSON. */
export function chainLink(prev: string, opText: string, result: unknown): string {
  return link(prev, opText, canonicalJson(result));
}

/** One link of the hash chain from the canonical JSON of the operation and of its result. */
function link(prev: string, opText: string, resultText: string): string {
  return createHash('sha256')
    .update(Buffer.from(prev, 'hex'))
    .update(opText)
    .update(resultText)
    .digest('hex');
}
