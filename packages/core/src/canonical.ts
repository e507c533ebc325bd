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
import { createHash } from 'node:crypto';

/** Encodes a JSON-like value canonically. Throws on values JSON cannot carry. */
export function canonicalJson(value: unknown): string {
  const out: string[] = [];
  write(value, out);
  return out.join('');
}

function write(value: unknown, out: string[]): void {
  switch (typeof value) {
    case 'string':
      out.push(JSON.stringify(value));
      return;
    case 'bigint':
      out.push(value.toString());
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`${value} has no JSON form`);
      out.push(JSON.stringify(value));
      return;
    case 'boolean':
      out.push(value ? 'true' : 'false');
      return;
    case 'object':
      if (value === null) out.push('null');
      else if (Array.isArray(value)) writeArray(value, out);
      else writeObject(value as Record<string, unknown>, out);
      return;
    default:
      throw new TypeError(`a ${typeof value} has no JSON form`);
  }
}

function writeArray(items: readonly unknown[], out: string[]): void {
  out.push('[');
  items.forEach((item, i) => {
    if (i > 0) out.push(',');
    write(item === undefined ? null : item, out);
  });
  out.push(']');
}

function writeObject(obj: Record<string, unknown>, out: string[]): void {
  const proto = Object.getPrototypeOf(obj);
  if (proto !== Object.prototype && proto !== null) {
    throw new TypeError(`a ${proto?.constructor?.name ?? 'value'} has no canonical JSON form`);
  }
  // Default sort compares UTF-16 code units, which is the order RFC 8785 requires.
  const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
  out.push('{');
  keys.forEach((k, i) => {
    if (i > 0) out.push(',');
    out.push(JSON.stringify(k), ':');
    write(obj[k], out);
  });
  out.push('}');
}

/** Lowercase hex SHA-256 of a string (as UTF-8) or of bytes. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** SHA-256 of the canonical form of a value, as lowercase hex. */
export function canonicalHash(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}
