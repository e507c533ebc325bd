/**
 * A token bucket per key (the attested agent on the intent route): `burst` tokens at
 * most, refilled at `ratePerSecond`; each request takes one. A refused request is
 * told how long to wait before one token is there again (the `Retry-After` of a 429).
 *
 * The buckets are bounded by `keysMax`: a bucket that has refilled to the brim says
 * nothing a missing one would not, so when the map is full such buckets are dropped
 * first; if none is, the bucket touched least recently goes (its agent then starts
 * again with a full burst, which errs on the side of the agent, never against it).
 * The clock is injected, so the tests step it.
 */
export interface RateLimitOptions {
  /** ratePerSecond is the sustained rate one key may reach. */
  ratePerSecond: number;
  /** burst is how many requests one key may make at once after a quiet spell. Invariant: burst >= 1. */
  burst: number;
  /** keysMax bounds the buckets kept. */
  keysMax: number;
  /**
   * refusalDelayMs: a refusal is answered after this long (at most its Retry-After), so
   * that a client which retries at once, ignoring Retry-After, sends a request per held
   * connection per delay rather than as fast as the node can refuse. 0 answers at once.
   */
  refusalDelayMs: number;
  /** now is a monotonic clock in milliseconds. */
  now: () => number;
}

interface Bucket {
  tokens: number;
  /** at is when `tokens` was last brought up to date, in the clock's milliseconds. */
  at: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  constructor(readonly o: RateLimitOptions) {
    if (!(o.ratePerSecond > 0) || !(o.burst >= 1) || !(o.keysMax >= 1) || !(o.refusalDelayMs >= 0)) throw new RangeError('rate limit: rate > 0, burst >= 1, keysMax >= 1 and refusalDelayMs >= 0');
  }

  /** Takes one token for `key`: 0 when the request may go ahead, else the seconds to wait (at least 1). */
  take(key: string): number {
    const now = this.o.now();
    let b = this.buckets.get(key);
    if (b === undefined) {
      this.makeRoom(now);
      b = { tokens: this.o.burst, at: now };
    } else {
      this.buckets.delete(key); // re-inserted below: the map's order is the order of last use
      b.tokens = this.level(b, now);
      b.at = now;
    }
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.o.ratePerSecond));
  }

  /** The seconds `key` must wait for a token, without taking one: 0 when one is there (or the key is unknown). */
  wait(key: string): number {
    const b = this.buckets.get(key);
    if (b === undefined) return 0;
    const tokens = this.level(b, this.o.now());
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - tokens) / this.o.ratePerSecond));
  }

  get size(): number {
    return this.buckets.size;
  }

  private level(b: Bucket, now: number): number {
    return Math.min(this.o.burst, b.tokens + (Math.max(0, now - b.at) * this.o.ratePerSecond) / 1000);
  }

  /** Frees a place for a new bucket when the map is full: full buckets first, else the least recently used. */
  private makeRoom(now: number): void {
    if (this.buckets.size < this.o.keysMax) return;
    for (const [k, b] of this.buckets) if (this.level(b, now) >= this.o.burst) this.buckets.delete(k);
    if (this.buckets.size >= this.o.keysMax) this.buckets.delete(this.buckets.keys().next().value!);
  }
}
