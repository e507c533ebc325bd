/**
 * Canonical encoding and hashing.
 *
 * `canonicalJson` is RFC 8785 (JSON Canonicalization Scheme) extended to `bigint`:
 * object keys sorted by UTF-16 code units, no white space, strings and numbers as
 * ECMAScript serializes them, and a `bigint` as its exact decimal digits (for an
 * integer in the safe range that is what RFC 8785 writes too). Policy bundles, log
 * operations, results and state snapshots are hashed in this form, so the same value
 * has the same hash on every replica.
 */
import { hash } from 'node:crypto';

/**
 * Encodes a JSON-like value canonically. Throws on values JSON cannot carry.
 *
 * It runs for every operation, result and record the ledger writes, so it builds one
 * string by concatenation (no part arrays, no closures), takes each member's opening
 * text from a cache, and sorts an object's keys only when they are not in order already.
 */
export function canonicalJson(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return quoted(value);
    case 'bigint':
      return value.toString();
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`${value} has no JSON form`);
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      if (value === null) return 'null';
      return Array.isArray(value) ? writeArray(value) : writeObject(value as Record<string, unknown>);
    default:
      throw new TypeError(`a ${typeof value} has no JSON form`);
  }
}

function writeArray(items: readonly unknown[]): string {
  let out = '[';
  for (let i = 0; i < items.length; i++) {
    if (i > 0) out += ',';
    const item = items[i];
    out += canonicalJson(item === undefined ? null : item);
  }
  return `${out}]`;
}

function writeObject(obj: Record<string, unknown>): string {
  const proto = Object.getPrototypeOf(obj);
  if (proto !== Object.prototype && proto !== null) {
    throw new TypeError(`a ${proto?.constructor?.name ?? 'value'} has no canonical JSON form`);
  }
  const keys = Object.keys(obj);
  sortKeys(keys);
  let out = '{';
  let first = true;
  for (const k of keys) {
    const v = obj[k];
    if (v === undefined) continue;
    out += first ? member(k, members, '') : member(k, laterMembers, ',');
    first = false;
    out += canonicalJson(v);
  }
  return `${out}}`;
}

/** Above this many names the member caches take no more (only the speed depends on them). */
const MEMBERS_MAX = 4096;
/** A name as it opens an object's first member (`"name":`), and as it opens any later one (`,"name":`). */
const members = new Map<string, string>();
const laterMembers = new Map<string, string>();

/**
 * The text that opens a member named `k`. The ledger's objects use a few hundred names
 * over and over; building the quoted name and the colon afresh for each member was
 * most of what encoding allocated (a third of a node's allocations under load), and a
 * cached text is added to the output in one step.
 */
function member(k: string, cache: Map<string, string>, before: string): string {
  let m = cache.get(k);
  if (m === undefined) {
    m = `${before}${quoted(k)}:`;
    if (cache.size < MEMBERS_MAX) cache.set(k, m);
  }
  return m;
}

/**
 * A string as JSON writes it. Printable ASCII other than the quote and the backslash
 * is written as it is, so a string of only those (every key, id, hash and currency
 * the ledger writes) is quoted here; any other is left to JSON.stringify, which
 * escapes controls and lone surrogates. Calling JSON.stringify for each of the couple
 * of hundred short strings of an intent cost more than the scan.
 */
function quoted(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return JSON.stringify(s);
  }
  return `"${s}"`;
}

/** Whether keys are in UTF-16 code-unit order (the comparison operators compare so). */
function sorted(keys: readonly string[]): boolean {
  for (let i = 1; i < keys.length; i++) if (keys[i - 1]! > keys[i]!) return false;
  return true;
}

/** Above this many keys an object's keys are sorted by `Array#sort`, below it by insertion. */
const INSERTION_SORT_MAX = 16;

/**
 * Sorts keys in place in UTF-16 code-unit order, the order RFC 8785 requires and the
 * default sort's. Most objects the ledger encodes have a handful of keys, built in their
 * schema's order rather than sorted (an outcome, its provenance, an entry, an amount:
 * about thirty per intent); an insertion sort with the comparison operator costs them
 * less than `Array#sort`, whose default comparison converts what it compares to strings
 * first, and costs keys already in order one pass. Larger objects (records are mostly
 * built in order) are sorted only when they are not in order already.
 */
function sortKeys(keys: string[]): void {
  if (keys.length > INSERTION_SORT_MAX) {
    if (!sorted(keys)) keys.sort();
    return;
  }
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i]!;
    let j = i - 1;
    for (; j >= 0 && keys[j]! > key; j--) keys[j + 1] = keys[j]!;
    keys[j + 1] = key;
  }
}

/**
 * Lowercase hex SHA-256 of a string (as UTF-8) or of bytes. One call, without a Hash
 * object: it runs for each record an intent writes, where making a Hash, feeding it
 * and reading its digest cost about 0.8 µs more than the hashing.
 */
export function sha256Hex(data: string | Uint8Array): string {
  return hash('sha256', data, 'hex');
}

/** SHA-256 of the canonical form of a value, as lowercase hex. */
export function canonicalHash(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}
