// Proves the change feed in a cluster: a feed read from a follower carries the same
// records as the primary's export; and a feed whose replica dies mid-stream (the
// primary, SIGKILLed) is resumed by the SDK's iterator on another replica from its
// cursor, so that across the failover every record arrives exactly once, in order,
// and equals the export of a survivor.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { AdminClient, type FeedRecord } from '@apl/client';
import { AGENT_A, TOKENS, bootstrap, envelope, testCerts } from '../support/node.js';
import { startCluster } from '../support/cluster.js';

t.setTimeout(120_000);

const ca = readFileSync(testCerts().ca);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a feed from a follower, and one that survives the primary\'s death', async (t) => {
  const c = await startCluster({ env: { APL_FEED_HEARTBEAT_INTERVAL_MS: '200' } });
  t.teardown(() => c.close());
  const leader = await c.leader();
  const others = c.members.map((m) => m.id).filter((id) => id !== leader);
  await bootstrap(c.handle(leader));
  const att = await c.issuer.sign(AGENT_A);
  const write = async (count: number, via: string[]) => {
    for (let k = 0; k < count; k++) {
      let r = await c.handle(via[k % via.length]!).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 10 + k }) });
      for (let tries = 0; r.status !== 200 && tries < 50; tries++) {
        await sleep(100);
        r = await c.handle(via[k % via.length]!).api('POST', '/api/v1/intents', { body: envelope(att, { minor: 10 + k }) });
      }
      if (r.status !== 200) throw new Error(`write failed: ${r.status} ${r.text}`);
    }
  };
  await write(20, [leader]);

  const admin = (ids: string[]) => new AdminClient({ url: ids.map((id) => c.members.find((m) => m.id === id)!.admin_url), token: TOKENS.feed, ca });
  const follower = admin([others[0]!]);
  const fromFollower: FeedRecord[] = [];
  const ac1 = new AbortController();
  const applied = (await c.handle(leader).adm('operator', 'GET', '/admin/v1/log/digest')).body.applied_index as number;
  for await (const r of follower.feed({ from: 0, signal: ac1.signal })) {
    fromFollower.push(r);
    if (r.index >= applied) ac1.abort();
  }
  follower.close();
  const exported = (await c.handle(leader).adm('operator', 'GET', '/admin/v1/log/export')).text.split('\n').filter(Boolean);
  t.same(fromFollower.map((r) => r.line), exported.slice(0, fromFollower.length), 'the follower\'s feed carries the primary\'s export, record for record');

  // The feed follows the primary first; the primary dies while intents stream in.
  const rail = admin([leader, ...others]);
  const received: FeedRecord[] = [];
  const reconnects: string[] = [];
  const ac2 = new AbortController();
  const reading = (async () => {
    for await (const r of rail.feed({ from: 0, signal: ac2.signal, reconnectDelayMs: 100, onReconnect: (e) => reconnects.push(e.reason) })) received.push(r);
  })();
  // Writes to the primary fail when it dies: what matters is what the feed carries.
  const writing = write(30, [leader]).catch(() => undefined);
  await sleep(300);
  await c.kill(leader);
  await writing;
  await c.leader(10_000);
  await write(30, others);
  const target = (await c.handle(others[0]!).adm('operator', 'GET', '/admin/v1/log/digest')).body.applied_index as number;
  const deadline = Date.now() + 15_000;
  while ((received[received.length - 1]?.index ?? 0) < target && Date.now() < deadline) await sleep(50);
  ac2.abort();
  await reading;
  rail.close();
  t.ok(reconnects.length >= 1, `the iterator reconnected (${reconnects.join('; ')})`);
  const survivor = (await c.handle(others[0]!).adm('operator', 'GET', '/admin/v1/log/export')).text.split('\n').filter(Boolean);
  const indexes = received.map((r) => r.index);
  t.same(indexes, [...indexes].sort((a, b) => a - b), 'in log order');
  t.equal(new Set(indexes).size, indexes.length, 'nothing repeated');
  t.same(received.map((r) => r.line), survivor.slice(0, received.length), 'nothing lost: every record of the survivor\'s export, in order');
  t.ok(received.length >= survivor.length - 2, `up to the end of the log (${received.length} of ${survivor.length})`);
});
