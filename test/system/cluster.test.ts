// Proves cluster mode with three real node processes on 127.0.0.1: a primary is
// elected; intents sent to each replica commit exactly once and every replica reads
// them (linearizable by default); after a SIGKILL of the primary a new one is elected
// within 3 s, writes go on through every survivor, and the old primary restarts and
// catches up; at the end every replica has the same state hash and digest, and each
// replica's export verifies.
import t from 'tap';
import { verifyExport } from '@apl/core';
import { AGENT_A, bootstrap, envelope } from '../support/node.js';
import { startCluster, type Cluster } from '../support/cluster.js';

async function digests(c: Cluster, ids: string[]): Promise<Record<string, { digest: string; state_hash: string; applied_index: number }>> {
  const out: Record<string, { digest: string; state_hash: string; applied_index: number }> = {};
  for (const id of ids) out[id] = (await c.handle(id).adm('operator', 'GET', '/admin/v1/log/digest')).body;
  return out;
}

/** Waits until every listed replica has applied at least `index`. */
async function converge(c: Cluster, ids: string[], timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const id of ids) {
    while ((await c.handle(id).agent.request('GET', '/readyz')).status !== 200) {
      if (Date.now() > deadline) throw new Error(`${id} is not ready`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  for (;;) {
    const d = await Promise.all(ids.map(async (id) => (await c.handle(id).adm('operator', 'GET', '/admin/v1/log/digest?consistency=local')).body.applied_index as number));
    const target = (await c.handle(ids[0]!).adm('operator', 'GET', '/admin/v1/cluster')).body.commit_index as number;
    if (d.every((a) => a >= target)) return;
    if (Date.now() > deadline) throw new Error(`replicas did not converge: ${d.join(', ')} (commit ${target})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

t.test('three processes: writes through every replica, a primary killed, the old one catching up', async (t) => {
  const c = await startCluster();
  t.teardown(() => c.close());
  const first = await c.leader();
  t.ok(['n1', 'n2', 'n3'].includes(first), `a primary is elected (${first})`);
  const follower = c.members.map((m) => m.id).find((id) => id !== first)!;
  const view = (await c.handle(first).adm('operator', 'GET', '/admin/v1/cluster')).body;
  t.equal(view.members.length, 3, 'the primary lists every member');
  t.ok(view.members.every((m: { lag: number | null }) => typeof m.lag === 'number'), 'with each one\'s lag');
  const ready = await c.handle(follower).agent.request('GET', '/readyz');
  t.equal(ready.status, 200, 'a follower that knows the primary and has applied its commit is ready');
  await bootstrap(c.handle(follower));
  const att = await c.issuer.sign(AGENT_A);

  const txns: string[] = [];
  for (const m of c.members) {
    for (let k = 0; k < 5; k++) {
      const body = envelope(att, { minor: 100 + k });
      const r = await c.handle(m.id).api('POST', '/api/v1/intents', { body });
      t.equal(r.status, 200, `intent through ${m.id}: ${r.text.slice(0, 200)}`);
      t.equal(r.body.verdict, 'Permitted');
      txns.push(body.transaction as string);
    }
  }
  for (const m of c.members) {
    const r = await c.handle(m.id).api('GET', `/api/v1/transactions/${txns[txns.length - 1]}`, { token: att });
    t.equal(r.status, 200, `${m.id} reads the last intent at once (linearizable)`);
    t.equal(r.headers.consistency, 'linearizable');
  }

  const killedAt = Date.now();
  await c.kill(first);
  const second = await c.leader(10_000);
  t.not(second, first, 'a new primary');
  t.ok(Date.now() - killedAt < 3_000, `a new primary ${Date.now() - killedAt} ms after the kill (within 3 s)`);
  for (const m of c.members.filter((x) => x.id !== first)) {
    const body = envelope(att, { minor: 7 });
    const r = await c.handle(m.id).api('POST', '/api/v1/intents', { body });
    t.equal(r.status, 200, `writes go on through ${m.id}`);
    txns.push(body.transaction as string);
  }
  await c.start(first);
  const ids = c.members.map((m) => m.id);

  // An operator may use any replica: a transfer asked of a follower is forwarded to the primary.
  const follower2 = ids.find((id) => id !== second)!;
  const transferTo = ids.find((id) => id !== second && id !== follower2) ?? follower2;
  await converge(c, ids);
  const moved = await c.handle(follower2).adm('operator', 'POST', '/admin/v1/cluster/transfer-leadership', { to: transferTo });
  t.equal(moved.status, 202, `transfer to ${transferTo} asked of ${follower2}: ${moved.text}`);
  const deadline = Date.now() + 10_000;
  let now = second;
  while (now !== transferTo && Date.now() < deadline) now = await c.leader(10_000).catch(() => now);
  t.equal(now, transferTo, 'leadership moved where it was asked to');
  await converge(c, ids);
  // Naming the primary, asked of a follower that knows it: nothing moves, and the answer says so.
  const still = await c.handle(follower2 === transferTo ? second : follower2).adm('operator', 'POST', '/admin/v1/cluster/transfer-leadership', { to: transferTo });
  t.equal(still.status, 200, still.text);
  t.strictSame(still.body, { leader: transferTo, transferring_to: null });
  const d = await digests(c, ids);
  t.equal(new Set(ids.map((id) => d[id]!.state_hash)).size, 1, `same state hash everywhere: ${JSON.stringify(d)}`);
  t.equal(new Set(ids.map((id) => d[id]!.digest)).size, 1, 'same ledger digest everywhere');
  for (const id of ids) {
    const r = await c.handle(id).adm('operator', 'GET', '/admin/v1/log/export?consistency=local');
    const result = verifyExport(r.text);
    t.ok(result.ok, `${id}'s export verifies: ${JSON.stringify(result).slice(0, 200)}`);
    if (result.ok) t.equal(result.state_hash, d[id]!.state_hash, `${id}'s export replays to its state hash`);
  }
  for (const txn of txns) {
    const r = await c.handle(first).api('GET', `/api/v1/transactions/${txn}`, { token: att });
    t.equal(r.status, 200, `the restarted ${first} reads ${txn}`);
  }
});
