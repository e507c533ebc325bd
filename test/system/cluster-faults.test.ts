// Proves what a cluster answers under real faults, with three node processes:
// 421 not_primary when forwarding is off (naming the primary) and when no primary is
// known (naming none); a linearizable read that asked a primary that stopped is
// answered once another leads; 503 commit_unavailable when the primary is cut off from both
// followers, and the retry with the same transaction id posting once; a member
// behind the log's compaction catching up by the chunked store stream; and a primary
// stopped with SIGTERM handing leadership over before it exits (the new primary
// logging once that it cannot reach it, and again when it is back); a member on a wiped
// disk, or on a store of another cluster, refusing to start.
import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { verifyExport } from '@apl/core';
import { AGENT_A, TOKENS, bootstrap, envelope } from '../support/node.js';
import { startCluster, type Cluster } from '../support/cluster.js';

// Seven clusters of three processes, one after another.
t.setTimeout(240_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function ready(c: Cluster, id: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await c.handle(id).agent.request('GET', '/readyz').catch(() => null))?.status !== 200) {
    if (Date.now() > deadline) throw new Error(`${id} is not ready: ${c.process(id)?.output()}`);
    await sleep(50);
  }
}

interface Digest {
  applied_index: number;
  state_hash: string;
  digest: string;
}

/** The digests of the primary and of a member, once the member has applied what the primary had (within 5 s). */
async function caughtUp(c: Cluster, leader: string, member: string): Promise<{ a: Digest; b: Digest }> {
  const digest = async (id: string) => (await c.handle(id).adm('operator', 'GET', '/admin/v1/log/digest')).body as Digest;
  const a = await digest(leader);
  let b = await digest(member);
  for (let k = 0; b.applied_index < a.applied_index && k < 100; k++) {
    await sleep(50);
    b = await digest(member);
  }
  return { a, b };
}

async function metric(c: Cluster, id: string, pattern: RegExp): Promise<number> {
  const r = await c.handle(id).admin.request('GET', '/metrics', { token: TOKENS.operator });
  const m = pattern.exec(r.text);
  return m ? Number(m[1]) : 0;
}

t.test('421 not_primary: forwarding off names the primary; no known primary names none', async (t) => {
  const c = await startCluster({ env: { APL_FORWARD_WRITES: 'false' } });
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  const [follower, third] = c.members.map((m) => m.id).filter((id) => id !== leader);
  const r = await c.handle(follower!).api('POST', '/api/v1/intents', { body: envelope(att) });
  t.equal(r.status, 421);
  t.same(r.body, { error: 'not_primary', message: 'This replica is not the primary.', primary_client_addr: c.members.find((m) => m.id === leader)!.agent_url });
  const admin = await c.handle(follower!).adm('operator', 'POST', '/admin/v1/parties', { id: 'party_more' });
  t.equal(admin.status, 421, 'an admin mutation on a follower too');

  await c.kill(leader);
  await c.kill(third!);
  const deadline = Date.now() + 10_000;
  let alone = await c.handle(follower!).api('POST', '/api/v1/intents', { body: envelope(att) });
  while (alone.body.primary_client_addr !== null && Date.now() < deadline) {
    await sleep(100);
    alone = await c.handle(follower!).api('POST', '/api/v1/intents', { body: envelope(att) });
  }
  t.equal(alone.status, 421);
  t.same(alone.body, {
    error: 'not_primary',
    message: 'This replica is not the primary, and no primary is known: an election is under way, or a majority is out of reach. Retry shortly; reads with consistency=local are served meanwhile.',
    primary_client_addr: null,
  }, 'with no primary known, none is named, and the answer says so');
  const read = await c.handle(follower!).api('GET', '/api/v1/transactions/txn_none', { token: att });
  t.equal(read.status, 421, 'a linearizable read with no primary known answers 421, not 500');
  const local = await c.handle(follower!).api('GET', '/api/v1/transactions/txn_none?consistency=local', { token: att });
  t.equal(local.status, 404, 'a local read is still served');
  const ready = await c.handle(follower!).agent.request('GET', '/readyz');
  t.equal(ready.status, 503);
  t.match(JSON.parse(ready.text), { status: 'not ready', leader: null, reason: 'no primary is known: an election is under way, or this replica cannot reach a majority of the voters' }, 'and /readyz says why');
});

t.test('a linearizable read waiting on a primary that stopped is answered once another leads, not at the commit timeout', async (t) => {
  const c = await startCluster({ env: { APL_COMMIT_TIMEOUT_MS: '20000' } });
  let stopped: number | null = null;
  t.teardown(async () => {
    if (stopped !== null) process.kill(stopped, 'SIGCONT');
    await c.close();
  });
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  const follower = c.members.map((m) => m.id).find((id) => id !== leader)!;
  stopped = c.process(leader)!.pid;
  process.kill(stopped, 'SIGSTOP');
  // The follower asks the stopped primary for the read's index; that request is lost.
  const started = Date.now();
  const read = await c.handle(follower).api('GET', '/api/v1/transactions/txn_during_failover', { token: att });
  const took = Date.now() - started;
  t.equal(read.status, 404, `the read is served (not found), not 503: ${read.text.slice(0, 200)}`);
  t.ok(took < 10_000, `answered in ${took} ms, an election or two, against a commit timeout of 20 s`);
});

t.test('503 commit_unavailable when the primary is cut off, and the retry posts once', async (t) => {
  const c = await startCluster({ env: { APL_COMMIT_TIMEOUT_MS: '1500' } });
  t.teardown(async () => {
    for (const m of c.members) {
      const p = c.process(m.id);
      if (p?.alive()) process.kill(p.pid, 'SIGCONT');
    }
    await c.close();
  });
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  const followers = c.members.map((m) => m.id).filter((id) => id !== leader);
  for (const id of followers) process.kill(c.process(id)!.pid, 'SIGSTOP');
  const body = envelope(att, { minor: 4242 });
  const cut = await c.handle(leader).api('POST', '/api/v1/intents', { body });
  t.equal(cut.status, 503);
  t.equal(cut.body.error, 'commit_unavailable');
  t.match(cut.body.message, /may or may not have been recorded/);
  for (const id of followers) process.kill(c.process(id)!.pid, 'SIGCONT');

  const now = await c.leader(10_000);
  let retry = await c.handle(now).api('POST', '/api/v1/intents', { body });
  for (let k = 0; retry.status === 503 && k < 20; k++) {
    await sleep(200);
    retry = await c.handle(now).api('POST', '/api/v1/intents', { body });
  }
  t.equal(retry.status, 200, `the retry is answered: ${retry.text.slice(0, 200)}`);
  const exported = await c.handle(now).adm('operator', 'GET', '/admin/v1/log/export');
  const posted = exported.text.split('\n').filter((l) => l.includes(`"transaction":"${body.transaction as string}"`) && l.includes('"SubmitIntent"'));
  t.equal(posted.length, 1, 'the transaction is in the log once');
  t.ok(verifyExport(exported.text).ok, 'and the export verifies');
});

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
  await ready(c, behind);
  const deadline = Date.now() + 15_000;
  while ((await metric(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/)) < 1) {
    if (Date.now() > deadline) throw new Error(`no snapshot installed on ${behind}: ${c.process(behind)!.output()}`);
    await sleep(100);
  }
  t.pass(`${behind} installed the primary's store`);
  // The primary counts the transfer when the member's acknowledgement arrives, a moment after the install.
  let sent = 0;
  for (let k = 0; k < 100 && sent < 1; k++) {
    sent = await metric(c, leader, /apl_peer_snapshots_total\{direction="sent",outcome="installed"\} (\d+)/);
    if (sent < 1) await sleep(50);
  }
  t.ok(sent >= 1, 'the primary counts the transfer');
  // And logs it, with how long it took (a failover waits that long for a member that needs the store).
  await logged(c, leader, /"event":"snapshot_sent"/);
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

t.test('SIGTERM on the primary hands leadership over before the process exits', async (t) => {
  const c = await startCluster();
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const p = c.process(leader)!;
  const stopped = Date.now();
  await c.stop(leader);
  t.match(p.output(), /"event":"leadership_handed_over"[^\n]*"done":true/, 'the old primary handed over');
  const next = await c.leader(5_000);
  t.not(next, leader);
  t.ok(Date.now() - stopped < 3_000, `a new primary ${Date.now() - stopped} ms after SIGTERM`);
  // The new primary says once that it cannot reach the member that stopped, and again when it is back.
  const said = (pattern: RegExp) => logged(c, next, pattern);
  await said(new RegExp(`"event":"peer_unreachable","peer":"${leader}"`));
  await c.start(leader);
  await ready(c, leader);
  await said(new RegExp(`"event":"peer_reachable","peer":"${leader}"`));
  // Counted up to the line saying it is reached again: a later outage (a stream the restarted member ends) is another one.
  const out = c.process(next)!.output();
  const outage = out.slice(0, out.indexOf(`"event":"peer_reachable","peer":"${leader}"`));
  t.equal(outage.match(new RegExp(`"event":"peer_unreachable","peer":"${leader}"`, 'g'))!.length, 1, 'the outage is logged once, not at every retry');
});

/** Waits until member `id` has logged a line matching `pattern`; throws, with its log, after 10 s. */
async function logged(c: Cluster, id: string, pattern: RegExp): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!pattern.test(c.process(id)!.output())) {
    if (Date.now() > deadline) throw new Error(`${id} did not log ${pattern}: ${c.process(id)!.output()}`);
    await sleep(50);
  }
}

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
  await ready(c, lost);
  const att = await c.issuer.sign(AGENT_A);
  for (let k = 0; k < 10; k++) {
    t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { transaction: `txn_copy_${k}` }) })).status, 200);
  }
  await ready(c, lost);
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
  await logged(c, leader, /"event":"log_compacted"/);
  t.pass('the primary compacts while every member is there');
  const behind = c.members.map((m) => m.id).find((id) => id !== leader)!;
  await c.kill(behind);
  for (let k = 0; k < 80; k++) t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 100 + k }) })).status, 200);
  await c.start(behind);
  await ready(c, behind);
  const { a, b } = await caughtUp(c, leader, behind);
  t.equal(b.state_hash, a.state_hash, 'caught up');
  t.equal(b.digest, a.digest, 'same digest');
  t.equal(await metric(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/), 0, 'from the log: no store was streamed');
  t.equal(await metric(c, leader, /apl_peer_snapshots_total\{direction="sent",outcome="installed"\} (\d+)/), 0, 'and the primary sent none');
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
  t.ok(await metric(c, leader, /apl_log_applied_index (\d+)/) > 60, 'the primary compacted past where the member stopped');
  await c.start(behind);
  await ready(c, behind);
  const a = (await c.handle(leader).adm('operator', 'GET', '/admin/v1/log/digest')).body;
  const b = (await c.handle(behind).adm('operator', 'GET', '/admin/v1/log/digest')).body;
  t.equal(b.state_hash, a.state_hash, 'caught up');
  t.equal(await metric(c, behind, /apl_peer_snapshots_total\{direction="received",outcome="installed"\} (\d+)/), 0, 'from the log: no snapshot was streamed');
});
