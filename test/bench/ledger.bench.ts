/**
 * Benchmarks of the ledger (npm run bench -- ledger):
 *  1. the core's apply: intents judged per second with no I/O;
 *  2. a standalone node over HTTPS: intents per second, latency percentiles and
 *     fsyncs per intent at several concurrencies (many proposals share one fsync).
 * Figures depend on the machine; they are printed, not asserted.
 */
import { performance } from 'node:perf_hooks';
import { ScriptArgs } from '../support/args.js';

new ScriptArgs('npm run bench -- ledger (no options)', {});
const { Harness, intent } = await import('@apl/core/testing');
const { AGENT_A, bootstrap, envelope, startTestNode } = await import('../support/node.js');

function coreApply(): void {
  const h = Harness.bootstrap();
  const n = 20_000;
  const ops = Array.from({ length: n }, (_, i) => intent({ transaction: `txn_b${i}`, action: { action: 'usage.record', bindings: {} } }));
  const start = performance.now();
  for (const op of ops) h.run(op);
  const s = (performance.now() - start) / 1000;
  console.log(`core apply: ${n} intents in ${s.toFixed(2)} s = ${Math.round(n / s)} intents/s (validation, judgement, hash chain; no I/O)`);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function overHttps(): Promise<void> {
  // One agent sends every intent here, far above the per-agent limit a node starts with;
  // this benchmark measures the ledger, not the limiter.
  const n = await startTestNode({ rate_limit: { agent_intents_per_second: 1_000_000, agent_burst: 1_000_000 } });
  try {
    await bootstrap(n);
    const att = await n.issuer.sign(AGENT_A);
    const fsyncs = async () => (await n.node.metrics.fsyncs.get()).values[0]?.value ?? 0;
    for (const concurrency of [1, 8, 64]) {
      const total = concurrency === 1 ? 500 : 2000;
      const before = await fsyncs();
      const latencies: number[] = [];
      let next = 0;
      const start = performance.now();
      await Promise.all(Array.from({ length: concurrency }, async () => {
        while (next < total) {
          next++;
          const t0 = performance.now();
          // usage.record creates no obligation, so outcomes stay the same size as the run goes on.
          const r = await n.agent.request('POST', '/api/v1/intents', { body: envelope(att, { minor: 100, action: { action: 'usage.record', bindings: {} } }) });
          if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
          latencies.push(performance.now() - t0);
        }
      }));
      const s = (performance.now() - start) / 1000;
      latencies.sort((a, b) => a - b);
      const syncs = (await fsyncs()) - before;
      console.log(`https, ${concurrency} in flight: ${total} intents in ${s.toFixed(2)} s = ${Math.round(total / s)} intents/s; ` +
        `latency p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms; ` +
        `${(syncs / total).toFixed(3)} fsyncs per intent`);
    }
  } finally {
    await n.close();
  }
}

coreApply();
await overHttps();
