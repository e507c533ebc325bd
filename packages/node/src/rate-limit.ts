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
 *
 * Finding the full buckets is a walk over all of them, so it is done only when one may
 * be full: `fullAtMin` is no later than the moment any bucket kept fills again. Every
 * take lowers it to its own bucket's moment if that is earlier, and a walk sets it to
 * the earliest moment of the buckets it keeps. With as many agents as `keysMax`, each
 * sending within a refill time, a new agent costs one map operation, not a walk.
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
  /** fullAtMin is a moment no later than the one at which any bucket kept is full again. Invariant: fullAtMin <= fullAt(b) for every bucket b. */
  private fullAtMin = Infinity;
  /** walks counts the walks over every bucket made to find the full ones. */
  walks = 0;

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
    const wait = b.tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - b.tokens) / this.o.ratePerSecond));
    if (wait === 0) b.tokens -= 1;
    this.fullAtMin = Math.min(this.fullAtMin, this.fullAt(b));
    return wait;
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

  /** The moment, in the clock's milliseconds, from which `b` is full (untouched meanwhile). */
  private fullAt(b: Bucket): number {
    return b.at + ((this.o.burst - b.tokens) * 1000) / this.o.ratePerSecond;
  }

  /** Frees a place for a new bucket when the map is full: full buckets first, else the least recently used. */
  private makeRoom(now: number): void {
    if (this.buckets.size < this.o.keysMax) return;
    if (now >= this.fullAtMin) this.dropFull(now);
    if (this.buckets.size >= this.o.keysMax) this.buckets.delete(this.buckets.keys().next().value!);
  }

  /** Drops every full bucket and sets `fullAtMin` to the earliest moment one kept fills. */
  private dropFull(now: number): void {
    let fullAtMin = Infinity;
    for (const [k, b] of this.buckets) {
      const at = this.fullAt(b);
      if (at <= now) this.buckets.delete(k);
      else fullAtMin = Math.min(fullAtMin, at);
    }
    this.fullAtMin = fullAtMin;
    this.walks++;
  }
}
