// ReadOnly tracks the leader's pending linearizable reads (ReadIndex, Raft thesis §6.4).
// A read registered at commit index `index` may be served once a quorum has answered a
// heartbeat sent after the registration: that proves no other leader could have committed
// anything newer at that moment. Rounds are numbered by a sequence the leader puts in the
// heartbeat's context; an answer for round s confirms every read registered up to s.
import type { NodeId } from './types.js';

export interface ReadRequest {
  seq: number;
  /** the commit index when the read arrived: the read may be served at this index. */
  index: number;
  /** the member that asked (the leader itself for local reads). */
  from: NodeId;
  context: Uint8Array;
  acks: Set<NodeId>;
}

export class ReadOnly {
  /** queue holds pending reads in registration order, so seqs grow along it. */
  private queue: ReadRequest[] = [];
  /** nextSeq never resets, so an answer from an earlier leadership can never match. */
  private nextSeq = 1;

  add(index: number, from: NodeId, context: Uint8Array, self: NodeId): ReadRequest {
    const req: ReadRequest = { seq: this.nextSeq++, index, from, context, acks: new Set([self]) };
    this.queue.push(req);
    return req;
  }

  /** lastSeq is the round to put in the next heartbeat, or null when no read waits. */
  lastSeq(): number | null {
    const last = this.queue[this.queue.length - 1];
    return last === undefined ? null : last.seq;
  }

  /**
   * ack records that `from` answered round `seq`. When `confirmed` says that round's
   * answers make a quorum (of the voters in force) it returns the reads it confirms
   * (every read up to and including it), else an empty list.
   */
  ack(seq: number, from: NodeId, confirmed: (acks: ReadonlySet<NodeId>) => boolean): ReadRequest[] {
    const at = this.queue.findIndex((r) => r.seq === seq);
    if (at < 0) return [];
    const req = this.queue[at] as ReadRequest;
    req.acks.add(from);
    if (!confirmed(req.acks)) return [];
    return this.queue.splice(0, at + 1);
  }

  pending(): number {
    return this.queue.length;
  }

  reset(): void {
    this.queue = [];
  }
}

/** encodeSeq puts a round number into a heartbeat context (8 bytes, big-endian). */
export function encodeSeq(seq: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq));
  return out;
}

/** decodeSeq reads a round number, or null when the context is not one. */
export function decodeSeq(ctx: Uint8Array | undefined): number | null {
  if (ctx === undefined || ctx.length !== 8) return null;
  const v = new DataView(ctx.buffer, ctx.byteOffset, 8).getBigUint64(0);
  return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : null;
}
