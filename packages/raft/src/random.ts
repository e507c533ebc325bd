// A seeded source for Config.random (mulberry32). Raft draws its election timeouts
// from config.random alone; tests and the simulator seed it to replay a run, and a
// server seeds it once from the operating system so that members' timeouts differ.

/** seededRandom returns a deterministic source of numbers in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
