// The JSON records both durable stores keep (hard state, snapshot meta, identity), and
// the error either throws when what it reads is not what it wrote. Pure decoding: no I/O.
import type { Identity } from './identity.js';
import { confState } from './membership.js';
import type { HardState, SnapshotMeta } from './types.js';

export class LogStoreCorruptError extends Error {
  override name = 'LogStoreCorruptError';
}

export function encodeJson(v: HardState | SnapshotMeta | Identity): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v));
}

export function decodeHardState(b: Uint8Array): HardState {
  const v = parseJson(b) as Partial<HardState>;
  if (!isIndex(v.term) || !isIndex(v.commit) || !(v.vote === null || typeof v.vote === 'string')) {
    throw new LogStoreCorruptError('malformed hard state');
  }
  return { term: v.term, vote: v.vote, commit: v.commit };
}

export function decodeMeta(b: Uint8Array): SnapshotMeta {
  const v = parseJson(b) as Partial<SnapshotMeta> & { members?: unknown };
  if (!isIndex(v.index) || !isIndex(v.term)) throw new LogStoreCorruptError('malformed snapshot meta');
  // A store written before membership changes holds the voters as `members`.
  if (v.conf === undefined && Array.isArray(v.members)) return { index: v.index, term: v.term, conf: confState(v.members.map(String)) };
  const c = v.conf as Partial<SnapshotMeta['conf']> | undefined;
  if (typeof c !== 'object' || c === null || !Array.isArray(c.voters) || !Array.isArray(c.learners) || typeof c.context !== 'object' ||
    !(c.removed === undefined || Array.isArray(c.removed))) {
    throw new LogStoreCorruptError('malformed snapshot meta');
  }
  // A store written before removed ids were remembered has no `removed`: it removed none.
  return { index: v.index, term: v.term, conf: confState(c.voters.map(String), c.learners.map(String), c.context, (c.removed ?? []).map(String)) };
}

export function decodeIdentity(b: Uint8Array): Identity {
  const v = parseJson(b) as Partial<Identity>;
  if (typeof v.clusterId !== 'string' || typeof v.nodeId !== 'string' || !Array.isArray(v.members)) throw new LogStoreCorruptError('malformed identity');
  return { clusterId: v.clusterId, nodeId: v.nodeId, members: v.members.map(String) };
}

function parseJson(b: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(b));
  } catch {
    throw new LogStoreCorruptError('malformed JSON record');
  }
}

function isIndex(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}
