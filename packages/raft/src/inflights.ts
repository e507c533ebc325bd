// Inflights bounds the append messages a leader has sent to one follower and not yet
// seen acknowledged: at most `capacity` messages and `maxBytes` entry bytes. When it is
// full the leader stops sending to that follower until acknowledgements free slots,
// which is the backpressure that keeps a slow follower from buffering the whole log.
import { assert } from './assert.js';

export class Inflights {
  /** lastIndex[k], bytes[k]: the last entry index and payload size of the k-th oldest message. */
  private readonly lastIndex: number[] = [];
  private readonly bytes: number[] = [];
  /** ring position of the oldest message; `count` messages follow it. */
  private start = 0;
  count = 0;
  /** sum of `bytes` over the messages in flight. */
  totalBytes = 0;

  constructor(
    readonly capacity: number,
    readonly maxBytes: number,
  ) {
    assert(capacity >= 1, 'inflight capacity >= 1');
  }

  /** add records a message whose last entry is `index`. Indexes must grow. */
  add(index: number, bytes: number): void {
    assert(!this.full(), 'add to full inflights');
    if (this.count > 0) assert(index > (this.lastIndex[this.slot(this.count - 1)] as number), 'inflight indexes grow');
    const slot = this.slot(this.count);
    this.lastIndex[slot] = index;
    this.bytes[slot] = bytes;
    this.count++;
    this.totalBytes += bytes;
  }

  /** freeLE frees every message whose last index is at most `index` (they were acknowledged). */
  freeLE(index: number): void {
    while (this.count > 0 && (this.lastIndex[this.start] as number) <= index) this.freeFirstOne();
  }

  /** freeFirstOne frees the oldest message, to unblock a window whose acknowledgements may be lost. */
  freeFirstOne(): void {
    if (this.count === 0) return;
    this.totalBytes -= this.bytes[this.start] as number;
    this.start = (this.start + 1) % this.capacity;
    this.count--;
    if (this.count === 0) this.start = 0;
  }

  full(): boolean {
    return this.count >= this.capacity || this.totalBytes >= this.maxBytes;
  }

  reset(): void {
    this.start = 0;
    this.count = 0;
    this.totalBytes = 0;
  }

  private slot(k: number): number {
    return (this.start + k) % this.capacity;
  }
}
