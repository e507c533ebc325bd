// Proves the SDK's feed iterator (AdminClient.feed) against a live node: it yields
// the export's records in log order, and when the node ends the stream (it stops)
// and is away for a while, it reconnects by itself and resumes after the last record
// it yielded: nothing is skipped and nothing repeated across the restart. Filters
// reach the node; an abort ends the iteration; a refusal of the role is thrown.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdminClient, ForbiddenError, type FeedRecord } from '@apl/client';
import { AGENT_A, TOKENS, bootstrap, envelope, startTestNode, testCerts, type Issuer, type TestNode } from './support/node.js';
import { freePort } from './support/cluster.js';

const ca = readFileSync(testCerts().ca);
const dir = mkdtempSync(join(tmpdir(), 'apl-feed-client-'));
let n: TestNode;
let port: number;
/** issuer is the first node's, whose key the ledger trusts: a restarted node makes another. */
let issuer: Issuer;

const start = () => startTestNode({ admin_port: port, feed: { heartbeat_interval_ms: 100 } }, dir);

t.before(async () => {
  // a fixed port, so that a restarted node answers at the same address
  port = await freePort();
  n = await start();
  await bootstrap(n);
  issuer = n.issuer;
});
t.teardown(async () => {
  await n.close();
  rmSync(dir, { recursive: true, force: true });
});

async function submit(count: number): Promise<void> {
  const att = await issuer.sign(AGENT_A);
  for (let k = 0; k < count; k++) {
    const r = await n.api('POST', '/api/v1/intents', { body: envelope(att, { minor: k % 2 === 0 ? 1000 + k : 700000 }) });
    if (r.status !== 200) throw new Error(`intent: ${r.status} ${r.text}`);
  }
}

async function exportLines(): Promise<string[]> {
  const a = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.operator });
  const lines: string[] = [];
  for await (const l of a.exportLog()) if (l !== '') lines.push(l);
  a.close();
  return lines;
}

t.test('the iterator resumes by itself after the node ends the stream and comes back', async (t) => {
  const admin = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.feed });
  const stop = new AbortController();
  const reconnects: { from: number; reason: string }[] = [];
  const got: FeedRecord[] = [];
  let target = Infinity;
  let wake: () => void = () => undefined;
  const reading = (async () => {
    for await (const r of admin.feed({ from: 0, signal: stop.signal, reconnectDelayMs: 50, onReconnect: (x) => reconnects.push(x) })) {
      got.push(r);
      if (r.index >= target) wake();
    }
  })();
  const reach = async (index: number) => {
    target = index;
    if (got.some((r) => r.index >= index)) return;
    await new Promise<void>((r) => (wake = r));
  };
  await submit(6);
  const before = await exportLines();
  await reach(Number(/"index":(\d+)/.exec(before[before.length - 1]!)![1]));
  // The node stops (its feeds end with shutting_down) and is away while the SDK retries.
  await n.close();
  await new Promise((r) => setTimeout(r, 300));
  n = await start();
  await submit(6);
  const after = await exportLines();
  await reach(Number(/"index":(\d+)/.exec(after[after.length - 1]!)![1]));
  stop.abort();
  await reading;
  admin.close();
  t.equal(reconnects[0]!.reason, 'shutting_down', 'the node said why the stream ended');
  t.equal(reconnects[0]!.from, got[before.length - 1]!.index + 1, 'and the SDK resumed from the last index it yielded plus one');
  t.ok(reconnects.length >= 2, `it retried while the node was away (${reconnects.length} attempts)`);
  t.strictSame(got.map((r) => r.line), after, 'every record of the export once, in order, across the restart');
  t.match(got[got.length - 1], { op: { type: 'SubmitIntent' }, result: { ok: true, value: { kind: 'recorded' } } }, 'records come parsed, with their line');
});

t.test('filters reach the node; an abort ends the iteration; a role without feed rights is thrown', async (t) => {
  const refusals = (await exportLines()).filter((l) => l.includes('"verdict":"ForbiddenRejected"')).length;
  t.equal(refusals, 6);
  const admin = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.operator });
  const stop = new AbortController();
  const verdicts: string[] = [];
  const beats: number[] = [];
  for await (const r of admin.feed({ type: 'intent', verdict: ['ForbiddenRejected'], signal: stop.signal, onHeartbeat: (h) => beats.push(h.next) })) {
    verdicts.push((r.result.value as { outcome: { verdict: string } }).outcome.verdict);
    if (verdicts.length === 6) stop.abort();
  }
  t.strictSame(verdicts, Array(6).fill('ForbiddenRejected'), 'only the refusals; the loop ended on abort');
  t.ok(beats.length >= 1, 'heartbeats are reported');
  // An abort mid-stream: the records already received but not yet yielded are not yielded after it.
  const early = new AbortController();
  let yielded = 0;
  for await (const _ of admin.feed({ from: 0, signal: early.signal })) {
    yielded++;
    early.abort();
  }
  t.equal(yielded, 1, 'nothing is yielded after the abort');
  admin.close();

  const reviewer = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.reviewer });
  await t.rejects(async () => {
    for await (const _ of reviewer.feed()) t.fail('no record for a reviewer');
  }, ForbiddenError);
  reviewer.close();
  const bad = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.operator });
  await t.rejects(bad.feed({ from: -1 }).next(), new RangeError('from must be a log index (an integer from 0), not -1'), 'a bad from is refused before any request');
  bad.close();
});
