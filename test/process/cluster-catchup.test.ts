// Proves how a member of a cluster of three node processes comes back after a fault,
// and when it must not: a member behind the log's compaction catching up by the
// chunked store stream; a member stopped while many entries are written catching up
// from the log its primary held for it, and one briefly behind from the log tail that
// compaction keeps, with no store sent; a member put back from an older copy stopping
// with what to do, one on a wiped disk refusing to rejoin, and a store of another
// cluster refused. It times nothing (the waits are bounds, not measures), so it runs
// beside another file; what a fault's timing proves is in
// test/system/cluster-faults.test.ts.
import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { verifyExport } from '@apl/core';
import { AGENT_A, bootstrap, envelope } from '../support/node.js';
import { caughtUp, metricOf, startCluster, waitLogged, waitReady } from '../support/cluster.js';

// Four clusters of three processes, one after another.
t.setTimeout(180_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a member behind compaction catches up by the chunked store stream', async (t) => {
  // No hold for a member behind (snapshot_hold_entries 0): the primary compacts past it.
  const c = await startCluster({ env: { APL_SNAPSHOT_INTERVAL_ENTRIES: '20', APL_SNAPSHOT_CATCHUP_ENTRIES: '5', APL_SNAPSHOT_HOLD_ENTRIES: '0' } });
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  const behind = c.members.map((m) => m.id).find((id) => id !== leader)!;
  await c.kill(behind);
  const txns: string[] = [];
  for (let k = 0; k < 80; k++) {
    const body = envelope(att, { minor: 1 + k });
    const r = await c.handle(leader).api('POST', '/api/v1/intents', { body });
    t.equal(r.status, 200);
    txns.push(body.transaction as string);
  }
  await c.start(behind);
  await waitReady(c, behind);
  const deadline = Date.now() + 15_000;
  while ((await metricOf(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/)) < 1) {
    if (Date.now() > deadline) throw new Error(`no snapshot installed on ${behind}: ${c.process(behind)!.output()}`);
    await sleep(100);
  }
  t.pass(`${behind} installed the primary's store`);
  // The primary counts the transfer when the member's acknowledgement arrives, a moment after the install.
  let sent = 0;
  for (let k = 0; k < 100 && sent < 1; k++) {
    sent = await metricOf(c, leader, /apl_peer_snapshots_total\{direction="sent",outcome="installed"\} (\d+)/);
    if (sent < 1) await sleep(50);
  }
  t.ok(sent >= 1, 'the primary counts the transfer');
  // And logs it, with how long it took (a failover waits that long for a member that needs the store).
  await waitLogged(c, leader, /"event":"snapshot_sent"/);
  const line = c.process(leader)!.output().split('\n').find((l) => l.includes('"event":"snapshot_sent"'));
  t.match(JSON.parse(line?.replace(/^stdout: /, '') ?? 'null'), { level: 'info', event: 'snapshot_sent', to: behind, ok: true, ms: Number }, `the primary logs the transfer: ${line}`);
  const { a, b } = await caughtUp(c, leader, behind);
  t.equal(b.state_hash, a.state_hash, 'same state hash');
  t.equal(b.digest, a.digest, 'same digest');
  const exported = await c.handle(behind).adm('operator', 'GET', '/admin/v1/log/export');
  const v = verifyExport(exported.text);
  t.ok(v.ok && v.state_hash === b.state_hash, 'its export is complete and verifies');
  const read = await c.handle(behind).api('GET', `/api/v1/transactions/${txns[0]}?consistency=local`, { token: att });
  t.equal(read.status, 200, 'it reads what it never received as entries');
});

t.test('a member put back from an older copy stops with what to do; one whose disk was wiped refuses to rejoin; a store of another cluster is refused', async (t) => {
  const c = await startCluster();
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const lost = c.members.map((m) => m.id).find((id) => id !== leader)!;

  // A copy of the member's data directory, taken while it was stopped, put back after it
  // acknowledged more: the primary's heartbeat counts on entries it no longer has.
  await c.stop(lost);
  const copy = `${c.dirs[lost]!}-copy`;
  cpSync(c.dirs[lost]!, copy, { recursive: true });
  t.teardown(() => rmSync(copy, { recursive: true, force: true }));
  await c.start(lost);
  await waitReady(c, lost);
  const att = await c.issuer.sign(AGENT_A);
  for (let k = 0; k < 10; k++) {
    t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { transaction: `txn_copy_${k}` }) })).status, 200);
  }
  await waitReady(c, lost);
  await c.stop(lost);
  for (const part of ['wal', 'ledger']) {
    rmSync(join(c.dirs[lost]!, part), { recursive: true, force: true });
    cpSync(join(copy, part), join(c.dirs[lost]!, part), { recursive: true });
  }
  const stopped = await c.start(lost).then(
    async (p) => {
      let timer: NodeJS.Timeout | undefined;
      const exit = await Promise.race([p.exited, new Promise<null>((r) => (timer = setTimeout(() => r(null), 20_000)))]);
      clearTimeout(timer);
      return { exit, output: p.output() };
    },
    (err: Error) => ({ exit: { code: Number(/\(code (\d+)/.exec(err.message)?.[1] ?? NaN), signal: null }, output: err.message }));
  t.equal(stopped.exit?.code, 2, `it stops with exit status 2: ${stopped.output.slice(-400)}`);
  t.match(stopped.output, new RegExp(`member ${lost} stops: the primary ${leader} counts on index \\d+, which this member acknowledged, but its log in \\S+ ends at \\d+`));
  t.match(stopped.output, `so it must not rejoin as ${lost}: remove it (DELETE /admin/v1/cluster/members/${lost} at the primary), then add a member with a new id and an empty data directory`);
  t.notMatch(stopped.output, /RaftInvariantError|at RaftLog/, 'no stack trace');
  t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_copy_after' }) })).status, 200, 'the others go on');

  await c.kill(lost);
  rmSync(join(c.dirs[lost]!, 'wal'), { recursive: true, force: true });
  rmSync(join(c.dirs[lost]!, 'ledger'), { recursive: true, force: true });
  const refused = await c.start(lost, { APL_CLUSTER_STATE: 'existing' }).then(() => null, (err: Error) => err.message);
  t.match(refused ?? 'it started', /exited before it started \(code 2[\s\S]*has an empty store, but its configuration says cluster "apl-test-cluster" already runs/, 'refused with the reason and what to do');
  t.match(refused ?? '', /Do not start it on an empty store: add a new member in its place \(cluster_state: join\), then remove this one; see docs\/operations.md, "Replacing a dead replica"/);
  const survivor = c.members.map((m) => m.id).find((id) => id !== lost)!;
  await c.kill(survivor);
  const foreign = await c.start(survivor, { APL_CLUSTER_ID: 'another-cluster' }).then(() => null, (err: Error) => err.message);
  t.match(foreign ?? 'it started', /belongs to cluster "apl-test-cluster", but the configuration names "another-cluster"/, 'a store of another cluster is refused');
});

t.test('a member stopped while many entries are written catches up from the log its primary held for it, with no snapshot', async (t) => {
  // As the test of the chunked store stream above, with the default snapshot_hold_entries:
  // the primary compacts every 20 entries keeping 5, but not past the stopped member.
  const c = await startCluster({ env: { APL_SNAPSHOT_INTERVAL_ENTRIES: '20', APL_SNAPSHOT_CATCHUP_ENTRIES: '5' } });
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  for (let k = 0; k < 30; k++) t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 1 + k }) })).status, 200);
  await waitLogged(c, leader, /"event":"log_compacted"/);
  t.pass('the primary compacts while every member is there');
  const behind = c.members.map((m) => m.id).find((id) => id !== leader)!;
  await c.kill(behind);
  for (let k = 0; k < 80; k++) t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 100 + k }) })).status, 200);
  await c.start(behind);
  await waitReady(c, behind);
  const { a, b } = await caughtUp(c, leader, behind);
  t.equal(b.state_hash, a.state_hash, 'caught up');
  t.equal(b.digest, a.digest, 'same digest');
  t.equal(await metricOf(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/), 0, 'from the log: no store was streamed');
  t.equal(await metricOf(c, leader, /apl_peer_snapshots_total\{direction="sent",outcome="installed"\} (\d+)/), 0, 'and the primary sent none');
  // Once the member has every entry, the primary compacts again.
  for (let k = 0; k < 30; k++) t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 300 + k }) })).status, 200);
  const compacted = () => c.process(leader)!.output().split('\n').filter((l) => l.includes('"event":"log_compacted"')).map((l) => (JSON.parse(l.replace(/^stdout: /, '')) as { index: number }).index);
  const deadline = Date.now() + 10_000;
  while (!compacted().some((i) => i > b.applied_index) && Date.now() < deadline) await sleep(100);
  t.ok(compacted().some((i) => i > b.applied_index), `and compacts again once it is back, past where it caught up (${compacted().join(', ')})`);
});

t.test('a member briefly behind catches up from the log tail that compaction keeps, with no snapshot', async (t) => {
  const c = await startCluster({ env: { APL_SNAPSHOT_INTERVAL_ENTRIES: '20', APL_SNAPSHOT_CATCHUP_ENTRIES: '200' } });
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  for (let k = 0; k < 30; k++) await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 1 + k }) });
  const behind = c.members.map((m) => m.id).find((id) => id !== leader)!;
  await c.kill(behind);
  for (let k = 0; k < 40; k++) t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 100 + k }) })).status, 200);
  t.ok(await metricOf(c, leader, /apl_log_applied_index (\d+)/) > 60, 'the primary compacted past where the member stopped');
  await c.start(behind);
  await waitReady(c, behind);
  const a = (await c.handle(leader).adm('operator', 'GET', '/admin/v1/log/digest')).body;
  const b = (await c.handle(behind).adm('operator', 'GET', '/admin/v1/log/digest')).body;
  t.equal(b.state_hash, a.state_hash, 'caught up');
  t.equal(await metricOf(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/), 0, 'from the log: no snapshot was streamed');
});
