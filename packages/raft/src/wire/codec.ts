// The wire codec for Raft messages: proto/raft.proto through protobufjs. A peer that
// decodes a message gets exactly what was encoded, or an error: 64-bit fields come
// back as numbers only when they are safe integers, never rounded, and a message
// from another cluster is refused before anything looks at it.
import protobuf from 'protobufjs';
import {
  MESSAGE_TYPES,
  type Entry,
  type Message,
  type MessageType,
  type Snapshot,
  type SnapshotMeta,
} from '../types.js';
import { confState } from '../membership.js';
import { RAFT_DESCRIPTOR } from './descriptor.js';

/**
 * The reasons a message is refused:
 * - malformed: not a valid encoding of apl.raft.v1.Message, or a field out of its domain.
 * - unsafe_integer: a 64-bit field at or beyond 2^53, which a JavaScript number cannot hold.
 * - foreign_cluster: the message names another cluster id.
 */
export type WireErrorCode = 'malformed' | 'unsafe_integer' | 'foreign_cluster';

export class WireError extends Error {
  constructor(
    readonly code: WireErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'WireError';
  }
}

const root = protobuf.Root.fromJSON(RAFT_DESCRIPTOR as protobuf.INamespace);
/** The protobufjs types of proto/raft.proto, for transports that embed them. */
export const wireTypes = {
  message: root.lookupType('apl.raft.v1.Message'),
  snapshotMeta: root.lookupType('apl.raft.v1.SnapshotMeta'),
};

export interface MessageCodec {
  /** the cluster id every encoded message carries and every decoded one must carry. */
  readonly clusterId: string;
  encode(m: Message): Uint8Array;
  /** decode refuses with a WireError; it never returns a message it could not read whole. */
  decode(bytes: Uint8Array): Message;
}

/** messageCodec binds the codec to one cluster id (non-empty: an empty id would match a peer that forgot to set it). */
export function messageCodec(clusterId: string): MessageCodec {
  if (clusterId === '') throw new Error('messageCodec: the cluster id must not be empty');
  return {
    clusterId,
    encode: (m) => wireTypes.message.encode(toWire(m, clusterId)).finish(),
    decode: (bytes) => fromWire(decodeWith(wireTypes.message, bytes), clusterId),
  };
}

export function encodeSnapshotMeta(meta: SnapshotMeta): Uint8Array {
  return wireTypes.snapshotMeta.encode(metaToWire(meta)).finish();
}

export function decodeSnapshotMeta(bytes: Uint8Array): SnapshotMeta {
  return metaFromWire(decodeWith(wireTypes.snapshotMeta, bytes));
}

// ---- encode: validate, then map field names onto the protobuf ones ----

function toWire(m: Message, clusterId: string): Record<string, unknown> {
  const type = MESSAGE_TYPES.indexOf(m.type);
  if (type < 0) throw new WireError('malformed', `unknown message type ${String(m.type)}`);
  const wire: Record<string, unknown> = {
    clusterId,
    type,
    from: m.from,
    to: m.to,
    term: u64(m.term, 'term'),
    logTerm: u64(m.logTerm, 'logTerm'),
    index: u64(m.index, 'index'),
    entries: m.entries.map(entryToWire),
    commit: u64(m.commit, 'commit'),
    reject: m.reject,
    rejectHint: u64(m.rejectHint, 'rejectHint'),
  };
  if (m.snapshot !== undefined) wire.snapshot = { meta: metaToWire(m.snapshot.meta), data: m.snapshot.data };
  if (m.context !== undefined) wire.context = m.context;
  return wire;
}

function entryToWire(e: Entry): Record<string, unknown> {
  return { index: u64(e.index, 'entry index'), term: u64(e.term, 'entry term'), data: e.data, type: e.type === 'conf' ? 1 : 0 };
}

function metaToWire(meta: SnapshotMeta): Record<string, unknown> {
  const { voters, learners, context, removed } = meta.conf;
  return { index: u64(meta.index, 'snapshot index'), term: u64(meta.term, 'snapshot term'), voters, learners, context, removed };
}

function u64(value: number, field: string): number {
  if (Number.isSafeInteger(value) && value >= 0) return value;
  throw new WireError('unsafe_integer', `${field} ${value} is not a safe non-negative integer`);
}

// ---- decode: refuse rather than guess ----

type Decoded = Record<string, unknown>;

function decodeWith(type: protobuf.Type, bytes: Uint8Array): Decoded {
  try {
    return type.decode(bytes) as unknown as Decoded;
  } catch (err) {
    throw new WireError('malformed', `not a ${type.name}: ${(err as Error).message}`);
  }
}

function fromWire(w: Decoded, clusterId: string): Message {
  if (w.clusterId !== clusterId) {
    throw new WireError('foreign_cluster', `message of cluster "${String(w.clusterId)}", this is "${clusterId}"`);
  }
  const m: Message = {
    type: messageType(w.type),
    from: nodeId(w.from, 'from'),
    to: nodeId(w.to, 'to'),
    term: safe(w.term, 'term'),
    logTerm: safe(w.logTerm, 'logTerm'),
    index: safe(w.index, 'index'),
    entries: (w.entries as Decoded[]).map(entryFromWire),
    commit: safe(w.commit, 'commit'),
    reject: w.reject === true,
    rejectHint: safe(w.rejectHint, 'rejectHint'),
  };
  if (present(w, 'snapshot')) m.snapshot = snapshotFromWire(w.snapshot as Decoded);
  if (present(w, 'context')) m.context = bytesOf(w.context);
  return m;
}

function snapshotFromWire(w: Decoded): Snapshot {
  if (!present(w, 'meta')) throw new WireError('malformed', 'a snapshot without metadata');
  return { meta: metaFromWire(w.meta as Decoded), data: bytesOf(w.data) };
}

function metaFromWire(w: Decoded): SnapshotMeta {
  const voters = (w.voters as string[]).map((id) => nodeId(id, 'voter'));
  const learners = (w.learners as string[]).map((id) => nodeId(id, 'learner'));
  const context = Object.fromEntries(Object.entries((w.context ?? {}) as Record<string, string>).map(([id, v]) => [nodeId(id, 'member'), String(v)]));
  // A sender that predates the field sends none: no id removed.
  const removed = ((w.removed ?? []) as string[]).map((id) => nodeId(id, 'removed id'));
  return { index: safe(w.index, 'snapshot index'), term: safe(w.term, 'snapshot term'), conf: confState(voters, learners, context, removed) };
}

function entryFromWire(w: Decoded): Entry {
  const index = safe(w.index, 'entry index');
  const term = safe(w.term, 'entry term');
  if (index < 1 || term < 1) throw new WireError('malformed', `entry (index ${index}, term ${term}) below 1`);
  if (w.type !== 0 && w.type !== 1) throw new WireError('malformed', `unknown entry type ${String(w.type)}`);
  const e: Entry = { index, term, data: bytesOf(w.data) };
  if (w.type === 1) e.type = 'conf';
  return e;
}

function messageType(value: unknown): MessageType {
  const type = typeof value === 'number' ? MESSAGE_TYPES[value] : undefined;
  if (type === undefined) throw new WireError('malformed', `unknown message type ${String(value)}`);
  return type;
}

function nodeId(value: unknown, field: string): string {
  if (typeof value === 'string' && value !== '') return value;
  throw new WireError('malformed', `${field} must name a member`);
}

/** safe maps a decoded uint64 (a number, or a Long when it does not fit 32 bits) to a number, or refuses it. */
function safe(value: unknown, field: string): number {
  if (typeof value === 'number') return value;
  const long = value as { high: number; low: number; toString(): string };
  // A uint64 is below 2^53 exactly when its high word is below 2^21.
  if (long.high >>> 0 < 0x200000) return (long.high >>> 0) * 0x1_0000_0000 + (long.low >>> 0);
  throw new WireError('unsafe_integer', `${field} ${long.toString()} is beyond 2^53 - 1`);
}

/** A view over the decoded bytes (protobufjs answers Buffers; the library speaks Uint8Array). */
function bytesOf(value: unknown): Uint8Array {
  const b = value as Uint8Array;
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

function present(w: Decoded, field: string): boolean {
  return Object.hasOwn(w, field) && w[field] !== null && w[field] !== undefined;
}
