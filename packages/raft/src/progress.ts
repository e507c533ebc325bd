// Progress is the leader's view of one member's log (Raft §5.3 nextIndex/matchIndex),
// with a small flow-control state machine in the manner of etcd:
//
// - probe: the leader does not know where the logs agree. It sends one append at a time
//   and waits for the answer (or the next heartbeat answer) before sending another.
// - replicate: the logs agree up to `match`; the leader streams appends optimistically,
//   advancing `next` as it sends, bounded by the inflight window.
// - snapshot: the entries the member needs are compacted away; the leader has sent a
//   snapshot and sends nothing more until the member answers or the send times out.
import { Inflights } from './inflights.js';

export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  /** match is the highest index known to be durable and agreeing on the member. Invariant: match < next. */
  match = 0;
  /** next is the index of the next entry to send. */
  next: number;
  state: ProgressState = 'probe';
  /** pendingSnapshot is the index of the snapshot in flight (state 'snapshot'), else 0. */
  pendingSnapshot = 0;
  /** recentActive: the member answered within the current election timeout (check-quorum). */
  recentActive = false;
  /** probeSent: in state 'probe', an append is out and unanswered. */
  probeSent = false;
  readonly inflights: Inflights;

  constructor(next: number, maxInflightMsgs: number, maxInflightBytes: number) {
    this.next = next;
    this.inflights = new Inflights(maxInflightMsgs, maxInflightBytes);
  }

  becomeProbe(): void {
    // After a snapshot the member's log reaches at least the snapshot's index, if it was
    // applied; if the snapshot failed, pendingSnapshot was cleared before calling this.
    this.next = Math.max(this.match + 1, this.pendingSnapshot + 1);
    this.state = 'probe';
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.inflights.reset();
  }

  becomeReplicate(): void {
    this.next = this.match + 1;
    this.state = 'replicate';
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.inflights.reset();
  }

  becomeSnapshot(index: number): void {
    this.state = 'snapshot';
    this.pendingSnapshot = index;
    this.probeSent = false;
    this.inflights.reset();
  }

  /** maybeUpdate records that the member matches up to `index`; returns false for a stale answer. */
  maybeUpdate(index: number): boolean {
    let updated = false;
    if (this.match < index) {
      this.match = index;
      this.probeSent = false;
      updated = true;
    }
    this.next = Math.max(this.next, index + 1);
    return updated;
  }

  /**
   * maybeDecrTo handles a rejected append of `rejected` (its prev index). `hint` is the
   * highest index that may still agree. Returns false when the rejection is stale.
   */
  maybeDecrTo(rejected: number, hint: number): boolean {
    if (this.state === 'replicate') {
      // Appends sent before the one that fixed `match` may be rejected late: ignore them.
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    // In probe only the answer to the latest probe (prev index next-1) counts.
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, hint + 1), this.match + 1);
    this.probeSent = false;
    return true;
  }

  /** sentEntries records an append carrying entries up to `lastIndex` (none when lastIndex < next). */
  sentEntries(lastIndex: number, bytes: number): void {
    if (this.state === 'replicate') {
      if (lastIndex >= this.next) {
        this.next = lastIndex + 1;
        this.inflights.add(lastIndex, bytes);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    }
  }

  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflights.full();
      case 'snapshot':
        return true;
    }
  }
}
