// Proves, under faults, the promises of the ledger: a short chaos run (see
// test/chaos/harness.ts) against three node processes, with the primary killed at
// least three times and stopped gracefully between kills, nodes paused and
// partitioned, ends with no violation: nothing
// acknowledged is lost, nothing posts twice, the books conserve, the replicas
// converge to the same state and digest, every export verifies, and no read went back
// in time. It also proves the run was not idle: intents were judged and read, and the
// nemesis really acted.
import t from 'tap';
import { runChaos } from '../chaos/harness.js';

t.setTimeout(240_000);

t.test('a bank workload survives primary kills, graceful restarts, pauses and partitions', async (t) => {
  const seed = Number(process.env.APL_CHAOS_SEED ?? 7);
  const lines: string[] = [];
  const report = await runChaos({ durationS: 50, seed, agents: 6, killsMin: 3, log: (l) => lines.push(l) }).catch((err: unknown) => {
    t.comment(lines.join('\n'));
    throw err;
  });
  t.same(report.violations, [], `no violation (seed ${seed})`);
  t.ok(report.counts.kills >= 3, `the primary was killed ${report.counts.kills} times`);
  t.ok(report.counts.restarts >= 2, `and stopped gracefully ${report.counts.restarts} times, handing over under load`);
  t.ok(report.counts.pauses + report.counts.partitions >= 2, `nodes were paused (${report.counts.pauses}) and partitioned (${report.counts.partitions})`);
  t.ok(report.counts.permitted >= 100, `${report.counts.permitted} intents were permitted and posted`);
  t.ok(report.counts.refused >= 10, `${report.counts.refused} were refused and recorded`);
  t.ok(report.counts.reads >= 50, `${report.counts.reads} linearizable reads were checked`);
  const failovers = report.failovers.map((f) => `${f.ms}${f.besides.length === 0 ? '' : ' (not the kill alone)'}`);
  t.ok(report.failovers.length >= 1, `writes resumed after kills (${failovers.join(', ')} ms)`);
  t.comment(`whole stores sent to members behind compaction: ${JSON.stringify(report.stores)}`);
  if (!report.ok) t.comment(lines.join('\n'));
});
