/**
 * The records of a streamed store, as they travel between members: each record is
 * framed as its key's length and its value's length (u32, big-endian), then the key's
 * and the value's UTF-8 bytes, and a chunk is frames end to end with the SHA-256 of the
 * whole chunk beside it.
 *
 * The state store's thread (level-thread-worker.ts) frames what its iterator reads and
 * writes what it receives, as bytes: the records are never decoded into strings, and
 * the event loop that runs Raft and `apply` only passes chunks on. A record's term in
 * the state hash is the SHA-256 of its key, a NUL and its value, as `recordHash` in
 * `@apl/core` takes it from the strings whose UTF-8 bytes these are; a receiver sums the
 * terms here and the store compares the sum with the state hash announced.
 */
import { createHash } from 'node:crypto';

/** A chunk as built or received: the frames and the hex SHA-256 of them. */
export interface FramedChunk {
  data: Uint8Array;
  digest: string;
}

/** What writing one received chunk found: the sum of its records' terms (hex) and the position record's text if it held it. */
export interface FramesWritten {
  sum: string;
  meta: string | null;
}

const NUL = Buffer.of(0);

export function sha256Hex(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Frames records into one chunk. */
export function encodeFrames(records: readonly (readonly [Uint8Array, Uint8Array])[]): FramedChunk {
  let size = 0;
  for (const [k, v] of records) size += 8 + k.length + v.length;
  const data = Buffer.allocUnsafeSlow(size);
  let at = 0;
  for (const [k, v] of records) {
    data.writeUInt32BE(k.length, at);
    data.writeUInt32BE(v.length, at + 4);
    data.set(k, at + 8);
    data.set(v, at + 8 + k.length);
    at += 8 + k.length + v.length;
  }
  return { data, digest: sha256Hex(data) };
}

/** The records of a chunk, as views of its bytes; a chunk that ends inside a record is refused. */
export function* decodeFrames(data: Uint8Array): Generator<[Buffer, Buffer]> {
  const b = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  while (at < b.length) {
    if (at + 8 > b.length) throw new Error('a snapshot chunk ends inside a record header');
    const kl = b.readUInt32BE(at);
    const vl = b.readUInt32BE(at + 4);
    if (at + 8 + kl + vl > b.length) throw new Error('a snapshot chunk ends inside a record');
    yield [b.subarray(at + 8, at + 8 + kl), b.subarray(at + 8 + kl, at + 8 + kl + vl)];
    at += 8 + kl + vl;
  }
}

/**
 * Reads a received chunk for writing: checks its digest, and answers its records, the
 * sum of the terms of those whose key starts with one of `hashed` (a raw sum, not
 * reduced), and the text of the record keyed `metaKey`, which is not summed.
 */
export function readChunk(chunk: FramedChunk & { seq: number }, hashed: readonly string[], metaKey: string): { records: [Buffer, Buffer][]; sum: bigint; meta: string | null } {
  if (sha256Hex(chunk.data) !== chunk.digest) throw new Error(`snapshot chunk ${chunk.seq} does not match its digest`);
  const records: [Buffer, Buffer][] = [];
  let sum = 0n;
  let meta: string | null = null;
  for (const [k, v] of decodeFrames(chunk.data)) {
    records.push([k, v]);
    const key = k.toString('utf8');
    if (key === metaKey) {
      meta = v.toString('utf8');
      continue;
    }
    if (!hashed.some((p) => key.startsWith(p))) continue;
    if (k.includes(0)) throw new Error(`snapshot chunk ${chunk.seq} holds a key with a NUL byte`);
    sum += BigInt(`0x${createHash('sha256').update(k).update(NUL).update(v).digest('hex')}`);
  }
  return { records, sum, meta };
}
