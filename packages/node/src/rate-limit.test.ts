// Proves the per-agent token bucket: a burst is allowed at once, then the sustained
// rate; a refusal says how many whole seconds to wait; keys do not share tokens; and
// the buckets stay within their bound, dropping full ones before active ones.
import fc from 'fast-check';
import t from 'tap';
import { RateLimiter } from './rate-limit.js';

function limiter(over: Partial<{ ratePerSecond: number; burst: number; keysMax: number }> = {}) {
  let now = 0;
  const l = new RateLimiter({ ratePerSecond: 10, burst: 5, keysMax: 100, refusalDelayMs: 0, ...over, now: () => now });
  return { l, step: (ms: number) => { now += ms; } };
}

t.test('a burst goes through at once, the next request waits for a token', async (t) => {
  const { l, step } = limiter();
  t.same(Array.from({ length: 5 }, () => l.take('a')), [0, 0, 0, 0, 0], 'five at once');
  t.equal(l.take('a'), 1, 'the sixth is told to wait a second (the header counts whole seconds)');
  step(100);
  t.equal(l.take('a'), 0, 'after 100 ms at 10/s one token is back');
  t.equal(l.take('a'), 1);
});

t.test('the sustained rate is the configured one', async (t) => {
  const { l, step } = limiter({ ratePerSecond: 50, burst: 1 });
  let allowed = 0;
  for (let ms = 0; ms < 10_000; ms += 5) {
    step(5);
    if (l.take('a') === 0) allowed++;
  }
  t.ok(allowed >= 499 && allowed <= 501, `${allowed} requests allowed in 10 s at 50/s`);
});

t.test('the wait grows with the deficit at a slow rate', async (t) => {
  const { l } = limiter({ ratePerSecond: 0.25, burst: 1 });
  t.equal(l.take('a'), 0);
  t.equal(l.take('a'), 4, 'one token takes four seconds at 0.25/s');
});

t.test('wait says what take would answer, without taking a token', async (t) => {
  const { l, step } = limiter({ burst: 1, ratePerSecond: 1 });
  t.equal(l.wait('a'), 0, 'an unknown agent need not wait');
  t.equal(l.take('a'), 0);
  t.equal(l.wait('a'), 1);
  t.equal(l.wait('a'), 1, 'waiting took nothing');
  step(1000);
  t.equal(l.wait('a'), 0);
  t.equal(l.take('a'), 0, 'the token was still there');
});

t.test('agents do not share a bucket', async (t) => {
  const { l } = limiter({ burst: 2 });
  l.take('a');
  l.take('a');
  t.equal(l.take('a'), 1, 'a is out of tokens');
  t.equal(l.take('b'), 0, 'b still has its own');
});

t.test('the buckets are bounded: full ones go first, then the least recently used', async (t) => {
  const { l, step } = limiter({ keysMax: 3, burst: 2, ratePerSecond: 1 });
  l.take('a');
  l.take('a');
  l.take('b');
  l.take('c');
  step(1000);
  // a is still short a token (it refills at 1/s from 0), b and c are full again.
  l.take('d');
  t.equal(l.size, 2, 'the full buckets b and c were dropped for d');
  t.equal(l.take('a'), 0, 'a kept its state: one token came back');
  t.equal(l.take('a'), 1, 'and only one');
  l.take('e');
  l.take('f');
  t.ok(l.size <= 3, `never more than keysMax buckets (${l.size})`);
});

t.test('with every bucket in use, a new agent takes one bucket\'s place without a walk over them all', async (t) => {
  // A token comes back every 100 s: no bucket is full again within the 5 s stepped.
  const { l, step } = limiter({ keysMax: 1000, burst: 20, ratePerSecond: 0.01 });
  for (let i = 0; i < 1000; i++) l.take(`a${i}`);
  t.equal(l.walks, 0, 'no walk while the map had room');
  let refused = 0;
  for (let i = 0; i < 5000; i++) {
    step(1);
    if (l.take(`b${i}`) !== 0) refused++;
  }
  t.equal(refused, 0, 'each new agent had its burst');
  t.equal(l.size, 1000, 'the least recently used bucket made room each time');
  t.equal(l.walks, 0, '5,000 new agents into a full map of active buckets, no walk');
  step(100_000);
  l.take('c');
  t.equal(l.walks, 1, 'once a bucket may be full, a new agent walks the map');
  t.equal(l.size, 1, 'and drops every full bucket');
});

/**
 * The limiter as first written: every new agent into a full map walks all buckets. The
 * bound on the walks must not change a single answer.
 */
class WalkEveryTime {
  readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(readonly rate: number, readonly burst: number, readonly keysMax: number) {}
  level(b: { tokens: number; at: number }, now: number): number {
    return Math.min(this.burst, b.tokens + (Math.max(0, now - b.at) * this.rate) / 1000);
  }
  take(key: string, now: number): number {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.keysMax) {
        for (const [k, v] of this.buckets) if (this.level(v, now) >= this.burst) this.buckets.delete(k);
        if (this.buckets.size >= this.keysMax) this.buckets.delete(this.buckets.keys().next().value!);
      }
      b = { tokens: this.burst, at: now };
    } else {
      this.buckets.delete(key);
      b.tokens = this.level(b, now);
      b.at = now;
    }
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.rate));
  }
}

t.test('every answer and every bucket kept is the one a walk on every new agent gives', async (t) => {
  const op = fc.record({ key: fc.integer({ min: 0, max: 11 }), stepMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 })) });
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 6 }), fc.array(op, { maxLength: 300 }), (keysMax, burst, rate, ops) => {
      const { l, step } = limiter({ keysMax, burst, ratePerSecond: rate });
      const ref = new WalkEveryTime(rate, burst, keysMax);
      let now = 0;
      for (const o of ops) {
        step(o.stepMs);
        now += o.stepMs;
        const key = `k${o.key}`;
        if (l.take(key) !== ref.take(key, now) || l.size !== ref.buckets.size) return false;
      }
      return true;
    }),
    { seed: 4242, numRuns: 500 },
  );
  t.pass('500 random runs agreed');
});

t.test('nonsense limits are refused', async (t) => {
  t.throws(() => new RateLimiter({ ratePerSecond: 0, burst: 1, keysMax: 1, refusalDelayMs: 0, now: () => 0 }));
  t.throws(() => new RateLimiter({ ratePerSecond: 1, burst: 0, keysMax: 1, refusalDelayMs: 0, now: () => 0 }));
});
