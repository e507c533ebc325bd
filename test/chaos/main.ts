// npm run chaos -- [--duration-s 600] [--seed 1] [--agents 8] [--kills 10]
// [--server-env APL_NAME=value ...]: a long chaos run against three node processes on
// 127.0.0.1 (see harness.ts); prints the nemesis' actions, the counts and every
// violation, and exits 1 when there is one. --server-env sets a member's configuration
// over the run's own (CHAOS_ENV), e.g. the compaction of a default node instead of the
// run's, which sends whole stores often.
import { ScriptArgs } from '../support/args.js';
import { serverOptions } from '../bench/support/server-args.js';

const args = new ScriptArgs('npm run chaos -- [--duration-s 600] [--seed N] [--agents 8] [--kills N] [--server-env APL_NAME=value ...]', {
  'duration-s': { type: 'string', default: '600' },
  seed: { type: 'string', default: String(Date.now() % 100_000) },
  agents: { type: 'string', default: '8' },
  kills: { type: 'string' },
  'server-env': { type: 'string', multiple: true },
});
const durationS = args.int('duration-s', 1);
const seed = args.int('seed');
const agents = args.int('agents', 1);
// At least one kill a minute, and never fewer than three.
const killsMin = args.values.kills === undefined ? Math.max(3, Math.floor(durationS / 60)) : args.int('kills');
const env = serverOptions(args.values, (why) => args.refuse(why)).env ?? {};
// The options are good: now the harness (the node's packages among it).
const { runChaos } = await import('./harness.js');
const started = Date.now();
const settings = Object.entries(env).map(([k, v]) => `${k}=${v}`).join(' ');
console.log(`chaos: ${durationS} s, seed ${seed}, ${agents} agents, ${killsMin} primary kills${settings === '' ? '' : `; members with ${settings}`}`);
const report = await runChaos({ durationS, seed, agents, killsMin, env, log: (l) => console.log(`${((Date.now() - started) / 1000).toFixed(1).padStart(7)} s  ${l}`) });
/** n, median and max of the failovers chosen. */
const spread = (alone: boolean) => {
  const f = report.failovers.filter((x) => (x.besides.length === 0) === alone).map((x) => x.ms).sort((a, b) => a - b);
  return { n: f.length, median: f[Math.floor(f.length / 2)] ?? null, max: f[f.length - 1] ?? null };
};
// A kill's failover alone, apart from those during which another fault began or a whole
// store was sent (harness.ts): each of those is in its failover line above.
console.log(JSON.stringify({ ...report.counts, stores: report.stores, applied: report.applied, failover_ms: spread(true), failover_not_alone_ms: spread(false) }));
for (const v of report.violations) console.log(`VIOLATION ${v}`);
console.log(report.ok ? 'chaos: every check passed' : `chaos: ${report.violations.length} violations`);
process.exit(report.ok ? 0 : 1);
