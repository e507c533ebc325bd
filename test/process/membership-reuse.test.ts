// Proves, with real processes, that a removed member's id is never reused and that a
// removed member serves no reads:
// - after n3 (a follower) is removed, POST /admin/v1/cluster/members naming n3 again
//   is answered 409 invalid_transition, at the primary and at a follower alike, saying
//   that the id was removed and ids are never reused; the configuration is unchanged;
// - n3, restarted on its old data directory, still says it was removed, and a read
//   there is refused with the removal message, as a write is: linearizable or local,
//   on either plane (its state is no longer kept current).
import t from 'tap';
import { adminRetried, startCluster, type Member } from '../support/cluster.js';

t.setTimeout(120_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function memberBody(m: Member): Record<string, string> {
  return { id: m.id, peer_addr: m.peer_addr, agent_url: m.agent_url, admin_url: m.admin_url };
}

t.test('a removed id is refused when added back, and a removed member refuses reads', async (t) => {
  const c = await startCluster();
  t.teardown(() => c.close());
  const primary = await c.leader();
  const [gone, stays] = ['n1', 'n2', 'n3'].filter((id) => id !== primary) as [string, string];

  // A primary just elected takes no change until it has committed an entry of its term
  // (409, "retry shortly"), and the cluster's leader is known before that.
  const removed = await adminRetried(c, primary, 'DELETE', `/admin/v1/cluster/members/${gone}`, undefined, 10_000);
  t.equal(removed.status, 200, `${gone} is removed: ${removed.text.slice(0, 200)}`);
  const deadline = Date.now() + 10_000;
  let ready = await c.handle(gone).agent.request('GET', '/readyz');
  while (!/removed/.test(ready.body?.reason ?? '') && Date.now() < deadline) {
    await sleep(100);
    ready = await c.handle(gone).agent.request('GET', '/readyz');
  }
  t.match(ready.body.reason, /removed from the cluster/, `${gone} knows it was removed`);

  const before = (await c.handle(stays).adm('operator', 'GET', '/admin/v1/cluster')).body;
  const body = memberBody(c.members.find((m) => m.id === gone)!);
  for (const at of [primary, stays]) {
    const r = await c.handle(at).adm('operator', 'POST', '/admin/v1/cluster/members', body);
    t.equal(r.status, 409, `adding ${gone} back at ${at} is refused`);
    t.match(r.body, {
      error: 'invalid_transition',
      message: `The membership change was refused: ${gone} was removed from the cluster and ids are never reused: add the member under a new id.`,
    });
  }
  for (const at of [primary, stays]) {
    const after = (await c.handle(at).adm('operator', 'GET', '/admin/v1/cluster')).body;
    t.same([after.voters, after.learners], [before.voters, before.learners], `nothing changed: ${at} shows the same members`);
    t.same(after.removed, [gone], `${at} lists ${gone} among the ids never to be used again`);
  }

  // The removed member, restarted on its old directory (the SRE's repro), refuses reads as it refuses writes.
  await c.stop(gone);
  await c.start(gone);
  const read = await c.handle(gone).adm('operator', 'GET', '/admin/v1/log/digest');
  t.equal(read.status, 422, 'a linearizable read on the removed member is refused');
  t.match(read.body, { error: 'gateway_error', message: /^This member was removed from the cluster; .*Send to another replica\.$/ });
  const local = await c.handle(gone).adm('operator', 'GET', '/admin/v1/log/digest?consistency=local');
  t.equal(local.status, 422, 'so is a local admin read');
  t.same(local.body, read.body);
  const agentLocal = await c.handle(gone).agent.request('GET', '/api/v1/obligations?consistency=local', { token: 'v4.public.unverified' });
  t.equal(agentLocal.status, 422, 'and a local agent read, before its attestation is verified');
  t.same(agentLocal.body, read.body);
  const again = await c.handle(primary).adm('operator', 'POST', '/admin/v1/cluster/members', body);
  t.equal(again.status, 409, 'and its id stays refused while it runs');
});
