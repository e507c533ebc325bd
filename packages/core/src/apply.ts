/**
 * `apply`: the one entry point of the state machine. Given the ledger and the next
 * committed operation with its log index, it judges the operation, mutates the
 * state (or not), returns the result, and, when the operation took effect, extends
 * the hash chain:
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
import { emptyState, type State } from './state.js';

export const GENESIS_HASH = '0'.repeat(64);

/** The state machine: the ledger state and its position in the log. */
export interface Ledger {
  state: State;
  /** applied is the log index of the last applied operation; 0 before the first. */
  applied: number;
  /** head is the hash-chain link of the last applied operation: the ledger digest. */
  head: string;
}

export type TickValue = { tick: number; breaches: Breach[] };
export type OpValue = IntentResult | TickValue | AdminValue;
export type OpResult = Result<OpValue>;

export interface Applied {
  index: number;
  result: OpResult;
  /** entry_hash is the chain link of an operation that took effect; null for one that did not. */
  entry_hash: string | null;
}

export function createLedger(): Ledger {
  return { state: emptyState(), applied: 0, head: GENESIS_HASH };
}

/** Applies the operation committed at `index`. Invariant: indexes strictly increase. */
export function apply(ledger: Ledger, index: number, op: Operation): Applied {
  assert(Number.isSafeInteger(index) && index > ledger.applied, `log index ${index} follows ${ledger.applied}`);
  const result = dispatch(ledger.state, index, op);
  ledger.applied = index;
  if (!tookEffect(result)) return { index, result, entry_hash: null };
  const entry_hash = chainLink(ledger.head, op, result);
  if (result.ok && 'kind' in result.value && result.value.kind === 'recorded') {
    ledger.state.transactions.get(result.value.outcome.transaction)!.entry_hash = entry_hash;
  }
  ledger.head = entry_hash;
  return { index, result, entry_hash };
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

/** One link of the hash chain. */
export function chainLink(prev: string, op: unknown, result: unknown): string {
  return createHash('sha256')
    .update(Buffer.from(prev, 'hex'))
    .update(canonicalJson(op))
    .update(canonicalJson(result))
    .digest('hex');
}
