/**
 * Applying the committed entries of one Ready to the state store, in two phases
 * (core/store.ts): everything the batch's operations read is loaded together, then
 * each is applied over one view, later ones seeing earlier ones' writes, and the
 * view's writes, the journal records of what took effect and the new position go to
 * the store in one batch. The replica runs this for every Ready; the differential
 * test runs it against the in-memory store.
 */
import { apply, skip, type Applied, type Operation } from '@apl/core';
import type { JournalRecord, LedgerStore } from './ledger-store.js';

/** A committed log entry as the replica read it: its operation and canonical text, or null for a no-op. */
export interface BatchEntry {
  index: number;
  term: number;
  op: { op: Operation; text: string } | null;
}

/** Applies the entries in order and writes the batch; the result of each (null for a no-op), once the batch has landed. */
export async function applyBatch(store: LedgerStore, entries: readonly BatchEntry[]): Promise<(Applied | null)[]> {
  const { results, landed } = await startBatch(store, entries);
  await landed;
  return results;
}

/**
 * Applies the entries in order and hands the batch to the store: the results, and
 * `landed`, which settles when the batch is on the store's disk (the next batch may be
 * applied before). The reads are loaded first; the operations are applied only once
 * `durable` has settled (the Raft log write their entries wait for, if any).
 */
export async function startBatch(store: LedgerStore, entries: readonly BatchEntry[], durable?: Promise<void>): Promise<{ results: (Applied | null)[]; landed: Promise<void>; seconds: BatchSeconds }> {
  if (entries.length === 0) return { results: [], landed: Promise.resolve(), seconds: { prefetch: 0, apply: 0 } };
  const view = store.view();
  const started = performance.now();
  await store.prefetch(view, entries.flatMap((e) => (e.op === null ? [] : [e.op.op])));
  const prefetched = performance.now();
  await durable;
  const applying = performance.now();
  const journal: JournalRecord[] = [];
  const results: (Applied | null)[] = [];
  for (const e of entries) {
    if (e.op === null) {
      skip(view, e.index);
      results.push(null);
      continue;
    }
    await store.ensure(view, e.op.op);
    const a = apply(view, e.index, e.op.op, e.op.text);
    // The record's canonical JSON, built around the texts the chain link hashed, so neither is encoded again.
    if (a.entry_hash !== null) journal.push({ index: e.index, text: `{"entry_hash":"${a.entry_hash}","index":${e.index},"op":${e.op.text},"result":${a.result_text}}` });
    results.push(a);
  }
  const landed = store.commit(view.commit(), journal, entries[entries.length - 1]!.term);
  return { results, landed, seconds: { prefetch: (prefetched - started) / 1000, apply: (performance.now() - applying) / 1000 } };
}

/** How long a batch took to load its reads, and to apply (the later reads of `ensure` included) and encode. */
export interface BatchSeconds {
  prefetch: number;
  apply: number;
}
