/**
 * The state store as the state machine sees it: records under string keys, grouped in
 * tables by key prefix. A replica keeps them in an embedded store (LevelDB); the
 * core's tests and the export verifier keep them in memory (memory-store.ts). Either
 * way `apply` never waits on a disk: applying is two phases, as in TigerBeetle.
 *
 *   1. Prefetch. `reads(view, op)` names the keys (and key prefixes to scan) the
 *      operation will read that the view does not hold yet; the store loads them into
 *      the view (`supply`, `supplyScan`); repeat until nothing is missing. Later reads
 *      may depend on earlier ones (the agent's party names the transaction's key), so
 *      an operation takes one to three rounds; the records of a whole batch are loaded
 *      together.
 *   2. Commit. `apply(view, index, op)` runs synchronously over the view: it reads
 *      only what was prefetched (reading anything else is a bug, and throws), and its
 *      writes go into the view, where later operations of the same batch see them.
 *      `view.commit()` hands the store the batch's writes, encoded once, with the
 *      new state hash, to write in one atomic batch with the applied index.
 *
 * Records are immutable: an operation that changes one sets a new value. A store may
 * therefore share decoded records between views and its cache.
 *
 * The state hash is a set hash: the sum, modulo 2^256, of SHA-256(key, 0x00, value)
 * over every record of the hashed tables, the value in its canonical JSON form. A
 * write adds the new record's term and subtracts the old one's, so the hash costs
 * O(records changed) per operation, never O(state). Indexes derived from the hashed
 * records (what a party owes, deadlines, where a transaction id was recorded) and the
 * position in the log are not part of it. See docs/state-store.md.
 */
import { canonicalJson, sha256Hex } from './canonical.js';
import { assert } from './errors.js';

/** The tables: key prefix, and whether their records are part of the state hash. */
export const TABLES = {
  meta: { prefix: 'meta/', hashed: true },
  party: { prefix: 'party/', hashed: true },
  agent: { prefix: 'agent/', hashed: true },
  root: { prefix: 'root/', hashed: true },
  account: { prefix: 'acct/', hashed: true },
  usage: { prefix: 'usage/', hashed: true },
  policy: { prefix: 'pol/', hashed: true },
  /**
   * recorded intents in log order: `<log index, 16 hex>` -> the transaction record. Keyed
   * by position, as TigerBeetle keys its objects by timestamp: each new record sorts
   * after every earlier one, so LevelDB's compactions move these, the bulk of the state,
   * down its levels instead of merging them again and again with older ones.
   */
  recorded: { prefix: 'rec/', hashed: true },
  /**
   * obligations by the tick that created them: `<created tick, 12 hex>/<party>/<id>`.
   * Like recorded intents, new ones sort after the old, so compactions move them down
   * LevelDB's levels rather than merge them with older ones.
   */
  obligation: { prefix: 'obl/', hashed: true },
  /** where each party's obligation is: `<party>/<obligation id>` -> the tick that created it. */
  obligationTick: { prefix: 'oid/', hashed: false },
  /** what each party owes now: a short summary per obligation, by party. */
  owed: { prefix: 'owed/', hashed: false },
  /** open obligations by deadline: `<deadline tick, 12 hex>/<created tick, 12 hex>/<party>/<id>`, empty values. */
  due: { prefix: 'due/', hashed: false },
  /**
   * where each party's transaction was recorded: `<party>/<transaction>` -> its log index
   * (transaction ids are scoped per party). The idempotency check reads this small record.
   */
  transaction: { prefix: 'txn/', hashed: false },
} as const;

export type TableName = keyof typeof TABLES;

/** The prefixes of the tables whose records the state hash sums. */
export const HASHED_PREFIXES: readonly string[] = Object.values(TABLES).filter((t) => t.hashed).map((t) => t.prefix);

/** Whether a key's record is part of the state hash. */
export function isHashed(key: string): boolean {
  return HASHED_PREFIXES.some((p) => key.startsWith(p));
}

/** Fixed-width lowercase hex, so that keys sort in number order. */
export function hexKey(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}

export const HASH_MODULUS = 1n << 256n;
export const EMPTY_STATE_HASH = '0'.repeat(64);

/** A record's term in the set hash; 0 for a record outside the hashed tables. */
export function recordHash(key: string, text: string): bigint {
  if (!isHashed(key)) return 0n;
  assert(!key.includes('\u0000'), 'keys hold no NUL');
  return BigInt(`0x${sha256Hex(`${key}\u0000${text}`)}`);
}

export function addHash(sum: bigint, term: bigint): bigint {
  return (sum + term) % HASH_MODULUS;
}

export function subHash(sum: bigint, term: bigint): bigint {
  return (sum - term + HASH_MODULUS) % HASH_MODULUS;
}

export function hashHex(sum: bigint): string {
  return sum.toString(16).padStart(64, '0');
}

export function hashFromHex(hex: string): bigint {
  return BigInt(`0x${hex}`);
}

/** A record as loaded: its decoded value and its term in the set hash. */
export interface Slot {
  value: unknown;
  hash: bigint;
}

/** The ledger's position: what the store keeps beside the records, written with them. */
export interface LedgerMeta {
  /** applied is the log index of the last applied entry; 0 before the first. */
  applied: number;
  /** head is the hash-chain link of the last operation that took effect: the ledger digest. */
  head: string;
  /** stateHash is the set hash of the hashed records, as 64 hex digits. */
  stateHash: string;
}

/** One written record: its key, its new value (null when deleted), encoded once. */
export interface Write {
  key: string;
  value: unknown;
  /** text is the canonical JSON of the value; null for a deletion. */
  text: string | null;
  /** hash is the record's new term in the set hash (0 for a deletion or an unhashed record). */
  hash: bigint;
}

/** What a view hands its store after the operations of a batch. */
export interface Commit {
  writes: Write[];
  meta: LedgerMeta;
}

/** How a table encodes its records: canonical JSON of what is stored (derived parts left out). */
export type Encoder = (value: unknown) => string;

/** What is missing before an operation can be applied. */
export interface ReadSet {
  keys: string[];
  prefixes: string[];
}

/** A key that `reads` did not name was read: a bug in the prefetch, never an input. */
export class NotPrefetched extends Error {
  override readonly name = 'NotPrefetched';
}

/**
 * A view of the store for one batch of operations: the records loaded for it, and the
 * batch's own writes over them.
 */
export class View {
  /** loaded: key -> its stored record, or null when the store has none. */
  private readonly loaded = new Map<string, Slot | null>();
  /** scanned: prefix -> the stored keys under it, sorted. */
  private readonly scanned = new Map<string, string[]>();
  /** writes: key -> the value written in this batch (null: deleted), in write order. */
  private readonly writes = new Map<string, unknown>();
  meta: LedgerMeta;

  /**
   * `encode` encodes a value for its key; `exists` answers, for a key that was never
   * loaded and is written, whether the store holds it (a store that can answer at once
   * checks blind writes; a disk store answers undefined and the key is taken as new).
   */
  constructor(
    meta: LedgerMeta,
    private readonly encode: (key: string, value: unknown) => string,
    private readonly exists: (key: string) => boolean | undefined = () => undefined,
  ) {
    this.meta = { ...meta };
  }

  // ------------------------------------------------------------ prefetch

  has(key: string): boolean {
    return this.writes.has(key) || this.loaded.has(key);
  }

  hasScan(prefix: string): boolean {
    return this.scanned.has(prefix);
  }

  /** Loads a stored record (or its absence) into the view. */
  supply(key: string, slot: Slot | null): void {
    if (!this.loaded.has(key)) this.loaded.set(key, slot);
  }

  /** Loads the stored keys under a prefix, and their records when given. */
  supplyScan(prefix: string, keys: string[]): void {
    this.scanned.set(prefix, keys);
  }

  // ------------------------------------------------------------ reads and writes (apply)

  /** The record at `key`, or undefined when there is none. Throws NotPrefetched if it was not loaded. */
  get(key: string): unknown {
    if (this.writes.has(key)) return this.writes.get(key) ?? undefined;
    const slot = this.loaded.get(key);
    if (slot === undefined) throw new NotPrefetched(`${key} was read but not prefetched`);
    return slot === null ? undefined : slot.value;
  }

  put(key: string, value: unknown): void {
    this.checkWritable(key, false);
    this.writes.set(key, value);
  }

  del(key: string): void {
    this.checkWritable(key, true);
    this.writes.set(key, null);
  }

  /** The keys under a scanned prefix as this batch sees them, in byte order. */
  scan(prefix: string): string[] {
    const stored = this.scanned.get(prefix);
    if (stored === undefined) throw new NotPrefetched(`${prefix}* was scanned but not prefetched`);
    const keys = new Set(stored);
    for (const [k, v] of this.writes) {
      if (!k.startsWith(prefix)) continue;
      if (v === null) keys.delete(k);
      else keys.add(k);
    }
    return [...keys].sort(compareKeys);
  }

  /**
   * A hashed record written without being read must be new (its id is unique by
   * construction, as an obligation of a transaction is), and one deleted must have
   * been read: the state hash needs the old record's term. Index records are free.
   */
  private checkWritable(key: string, deleting: boolean): void {
    if (this.writes.has(key) || this.loaded.has(key) || !isHashed(key)) return;
    assert(!deleting, `${key} is deleted without being read`);
    assert(this.exists(key) !== true, `${key} is written blindly but exists`);
  }

  // ------------------------------------------------------------ commit

  /** The batch's writes, each encoded once, and the position and state hash they lead to. */
  commit(): Commit {
    let sum = hashFromHex(this.meta.stateHash);
    const writes: Write[] = [];
    for (const [key, value] of this.writes) {
      const old = this.loaded.get(key);
      if (old) sum = subHash(sum, old.hash);
      if (value === null) {
        writes.push({ key, value: null, text: null, hash: 0n });
        continue;
      }
      const text = this.encode(key, value);
      const hash = recordHash(key, text);
      sum = addHash(sum, hash);
      writes.push({ key, value, text, hash });
    }
    return { writes, meta: { ...this.meta, stateHash: hashHex(sum) } };
  }
}

/** Byte order of keys (they are ASCII, so UTF-16 order is byte order). */
export function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The canonical JSON a value is stored as. */
export const canonicalEncode: Encoder = (value) => canonicalJson(value);
