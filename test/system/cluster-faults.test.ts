// Proves what a cluster answers under real faults, with three node processes, where
// the time an answer takes is part of what is proved: 421 not_primary when forwarding
// is off (naming the primary) and when no primary is known (naming none); a
// linearizable read that asked a primary that stopped is answered once another leads,
// not at the commit timeout; 503 commit_unavailable when the primary is cut off from
// both followers, and the retry with the same transaction id posting once; and a
// primary stopped with SIGTERM handing leadership over before it exits, a new primary
// within 3 s (the new primary and the other follower each logging once that they
// cannot reach it, and again when it is back). The cases that time nothing are in
// test/process/cluster-catchup.test.ts.
import t from 'tap';
import { verifyExport } from '@apl/core';
import { AGENT_A, bootstrap, envelope } from '../support/node.js';
import { startCluster, waitLogged, waitReady } from '../support/cluster.js';

// Four clusters of three processes, one after another.
t.setTimeout(150_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
  // The new primary says once that it cannot reach the member that stopped, and again when it is back;
  // so does the other follower, which has nothing to send it (it did not say so until the next election).
  const third = c.members.map((m) => m.id).find((id) => id !== leader && id !== next)!;
  const said = (pattern: RegExp) => waitLogged(c, next, pattern);
  await said(new RegExp(`"event":"peer_unreachable","peer":"${leader}"`));
  await waitLogged(c, third, new RegExp(`"event":"peer_unreachable","peer":"${leader}"`));
  await sleep(3_000); // longer than the channels' reconnect backoff (2 s at most)
  await c.start(leader);
  await waitReady(c, leader);
  await said(new RegExp(`"event":"peer_reachable","peer":"${leader}"`));
  await waitLogged(c, third, new RegExp(`"event":"peer_reachable","peer":"${leader}"`));
  t.pass(`${third}, a follower, says ${leader} is reached again too`);
  // Counted up to the line saying it is reached again: a later outage (a stream the restarted member ends) is another one.
  const out = c.process(next)!.output();
  const outage = out.slice(0, out.indexOf(`"event":"peer_reachable","peer":"${leader}"`));
  t.equal(outage.match(new RegExp(`"event":"peer_unreachable","peer":"${leader}"`, 'g'))!.length, 1, 'the outage is logged once, not at every retry');
});
