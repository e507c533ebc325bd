/**
 * The state store in memory: the same records, encodings, prefetch and state hash as
 * a replica's LevelDB store, in a Map. The core's tests, the simulator of a ledger
 * and the export verifier run on it.
 *
 * It is strict where a disk store cannot afford to be: a view over it holds only what
 * `reads` named (so a read that was not named fails a test), a new record written
 * without being read must really be new, and every record handed to `apply` is
 * frozen, so a change made in place instead of by setting a new record throws.
 */
import { apply, GENESIS_HASH, skip, type Applied } from './apply.js';
import type { Operation } from './ops.js';
import { decodeRecord, encodeRecord } from './records.js';
import { reads } from './reads.js';
import { State } from './state.js';
import {
  addHash, compareKeys, EMPTY_STATE_HASH, hashHex, recordHash, View, type Commit, type LedgerMeta, type ReadSet, type Slot,
} from './store.js';

/** The most rounds of `reads` an operation may need; more is a bug in `reads`. */
const PREFETCH_ROUNDS_MAX = 4;

export class MemoryStore {
  /** records: key -> stored text. */
  private readonly records = new Map<string, string>();
  meta: LedgerMeta = { applied: 0, head: GENESIS_HASH, stateHash: EMPTY_STATE_HASH };

  /** A fresh view for a batch of operations. */
  view(): View {
    return new View(this.meta, encodeRecord, (key) => this.records.has(key));
  }

  /** Loads what `reads` named into the view. */
  load(view: View, set: ReadSet): void {
    for (const key of set.keys) view.supply(key, this.slot(key));
    for (const prefix of set.prefixes) view.supplyScan(prefix, this.keysUnder(prefix));
  }

  /** Prefetches what the operation reads, in as many rounds as it takes. */
  prefetch(view: View, op: Operation): void {
    for (let round = 0; ; round++) {
      const set = reads(view, op);
      if (set.keys.length === 0 && set.prefixes.length === 0) return;
      if (round >= PREFETCH_ROUNDS_MAX) throw new Error(`reads of ${op.type} did not settle in ${PREFETCH_ROUNDS_MAX} rounds`);
      this.load(view, set);
    }
  }

  /** Writes a committed batch. */
  write(c: Commit): void {
    for (const w of c.writes) {
      if (w.text === null) this.records.delete(w.key);
      else this.records.set(w.key, w.text);
    }
    this.meta = c.meta;
  }

  /** Applies one operation at `index`: prefetch, apply, write. */
  apply(index: number, op: Operation): Applied {
    const view = this.view();
    this.prefetch(view, op);
    const a = apply(view, index, op);
    this.write(view.commit());
    return a;
  }

  /** Moves past a log entry that is no operation. */
  skip(index: number): void {
    const view = this.view();
    skip(view, index);
    this.write(view.commit());
  }

  /** The stored text of a record, or undefined. */
  text(key: string): string | undefined {
    return this.records.get(key);
  }

  /** Every stored key under a prefix, in byte order. */
  keysUnder(prefix: string): string[] {
    return [...this.records.keys()].filter((k) => k.startsWith(prefix)).sort(compareKeys);
  }

  /** Every record under a prefix, decoded, in key order: for tests and tools. */
  values<T>(prefix: string): T[] {
    return this.keysUnder(prefix).map((k) => this.slot(k)!.value as T);
  }

  /** The set hash recomputed over every stored record, for checking the one kept per write. */
  recomputedStateHash(): string {
    let sum = 0n;
    for (const [key, text] of this.records) sum = addHash(sum, recordHash(key, text));
    return hashHex(sum);
  }

  /** The state as typed tables, every record readable: for tests and tools, never for `apply`. */
  read(): State {
    return new State(new EagerView(this));
  }

  slot(key: string): Slot | null {
    const text = this.records.get(key);
    return text === undefined ? null : { value: deepFreeze(decodeRecord(key, text)), hash: recordHash(key, text) };
  }
}

/** A view that loads any record it is asked for: reading only. */
class EagerView extends View {
  constructor(private readonly store: MemoryStore) {
    super(store.meta, encodeRecord);
  }

  override get(key: string): unknown {
    if (!this.has(key)) this.supply(key, this.store.slot(key));
    return super.get(key);
  }

  override scan(prefix: string): string[] {
    if (!this.hasScan(prefix)) this.supplyScan(prefix, this.store.keysUnder(prefix));
    return super.scan(prefix);
  }

  override put(): void {
    throw new Error('a read view is not written');
  }

  override del(): void {
    throw new Error('a read view is not written');
  }
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
