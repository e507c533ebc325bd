// Proves that a restart costs what was not yet applied, not the history: a node
// stopped after a stream of intents opens at the applied index its store holds and
// applies no entry again (only a new leader's no-op follows); its state, digest and
// reads are those it had; a data directory whose Raft log is the LevelDB store of
// earlier releases keeps it; the write-ahead log may be a link to another directory
// (another device), and a start without it beside a store that applied entries is
// refused, as is one on a log cut short behind the store; and obligations other than
// the owed ones come in pages.
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '@apl/node';
import { Level } from 'level';
import { confState, LevelLogStore } from '@apl/raft';
import { AGENT_A, EVIDENCE, bootstrap, envelope, startTestNode } from '../support/node.js';

t.test('a restarted node applies nothing its store already holds', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-restart-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = await startTestNode({ snapshot_interval_entries: 50, snapshot_catchup_entries: 0 }, dir);
  await bootstrap(first);
  const att = await first.issuer.sign(AGENT_A);
  const ids: string[] = [];
  for (let k = 0; k < 120; k++) {
    const r = await first.api('POST', '/api/v1/intents', { body: envelope(att, { minor: 10 + k }) });
    t.equal(r.status, 200);
    ids.push(r.body.transaction);
  }
  const digest = (await first.adm('operator', 'GET', '/admin/v1/log/digest')).body;
  const issuer = first.issuer;
  await first.close();

  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({ write(chunk: Buffer, _e, cb) { for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>); cb(); } });
  const second = await startTestNode({ snapshot_interval_entries: 50, snapshot_catchup_entries: 0 }, dir, createLogger('info', 'n1', sink));
  try {
    const open = lines.find((l) => l.event === 'replica_open')!;
    t.equal(open.applied, digest.applied_index, 'the store says where it is');
    t.equal(open.last, digest.applied_index, 'and nothing after it is waiting in the log');
    for (let i = 0; i < 100 && (await second.agent.request('GET', '/readyz')).status !== 200; i++) await new Promise((r) => setTimeout(r, 20));
    const applied = (await second.node.metrics.entriesApplied.get()).values[0]?.value ?? 0;
    t.equal(applied, 0, 'no operation was applied again');
    const after = (await second.adm('operator', 'GET', '/admin/v1/log/digest')).body;
    t.equal(after.digest, digest.digest);
    t.equal(after.state_hash, digest.state_hash);
    t.equal(after.applied_index, digest.applied_index + 1, 'the new leader appended its no-op');
    const att2 = await issuer.sign(AGENT_A);
    t.equal((await second.api('GET', `/api/v1/transactions/${ids[0]}`, { token: att2 })).status, 200, 'the first intent reads back');
    t.equal((await second.api('GET', `/api/v1/transactions/${ids[119]}`, { token: att2 })).status, 200, 'the last too');
  } finally {
    await second.close();
  }
});

/** Compaction every 20 entries, keeping none before the applied index. */
const COMPACT_OFTEN = { snapshot_interval_entries: 20, snapshot_catchup_entries: 0 };

/** A node on `dir` bootstrapped, 40 intents recorded, then stopped: their ids, its digest and its issuer. */
async function fortyIntents(dir: string): Promise<{ ids: string[]; digest: { applied_index: number; state_hash: string }; issuer: Awaited<ReturnType<typeof startTestNode>>['issuer'] }> {
  const first = await startTestNode(COMPACT_OFTEN, dir);
  await bootstrap(first);
  const att = await first.issuer.sign(AGENT_A);
  const ids: string[] = [];
  for (let k = 0; k < 40; k++) ids.push((await first.api('POST', '/api/v1/intents', { body: envelope(att, { minor: 10 + k }) })).body.transaction);
  const digest = (await first.adm('operator', 'GET', '/admin/v1/log/digest')).body as { applied_index: number; state_hash: string };
  const issuer = first.issuer;
  await first.close();
  return { ids, digest, issuer };
}

t.test('a data directory whose Raft log is a LevelDB store keeps using it, across restarts', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-restart-legacy-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // The Raft log as a release before the write-ahead log made it: LevelDB under raft/.
  await (await LevelLogStore.open(join(dir, 'raft'))).close();
  const { ids, digest, issuer } = await fortyIntents(dir);
  t.notOk(existsSync(join(dir, 'wal')), 'no write-ahead log was made beside it');
  const boot = await (async () => {
    const log = await LevelLogStore.open(join(dir, 'raft'));
    try {
      return await log.load();
    } finally {
      await log.close();
    }
  })();
  t.ok((boot.snapshot?.meta.index ?? 0) > 0, 'the LevelDB log was written and compacted');
  t.equal(boot.hardState.commit, digest.applied_index, 'up to the last entry applied');

  const second = await startTestNode({ snapshot_interval_entries: 20, snapshot_catchup_entries: 0 }, dir);
  try {
    const after = (await second.adm('operator', 'GET', '/admin/v1/log/digest')).body;
    t.equal(after.state_hash, digest.state_hash, 'it restarts to the same state');
    const att2 = await issuer.sign(AGENT_A);
    t.equal((await second.api('GET', `/api/v1/transactions/${ids[39]}`, { token: att2 })).status, 200, 'the last intent reads back');
    t.equal((await second.api('POST', '/api/v1/intents', { body: envelope(att2, { minor: 99 }) })).status, 200, 'and intents go on');
  } finally {
    await second.close();
  }
  t.notOk(existsSync(join(dir, 'wal')), 'still no write-ahead log');
});

t.test('the Raft log may live elsewhere: <data_dir>/wal a link to another directory, across compaction and restart', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-restart-waldir-'));
  const elsewhere = mkdtempSync(join(tmpdir(), 'apl-restart-device-'));
  t.teardown(() => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  });
  // As an operator gives the log its own device: mounted, or linked, at <data_dir>/wal.
  symlinkSync(elsewhere, join(dir, 'wal'));
  const { ids, digest, issuer } = await fortyIntents(dir);
  t.ok(lstatSync(join(dir, 'wal')).isSymbolicLink(), 'the link is left in place');
  t.ok(readdirSync(elsewhere).some((n) => n.endsWith('.wal')), 'the segments are in the other directory');
  t.ok(readdirSync(join(elsewhere, 'snap')).some((n) => n.endsWith('.snap')), 'and the compaction\'s snapshot records');

  const second = await startTestNode(COMPACT_OFTEN, dir);
  try {
    const after = (await second.adm('operator', 'GET', '/admin/v1/log/digest')).body;
    t.equal(after.state_hash, digest.state_hash, 'it restarts to the same state');
    t.ok(after.applied_index >= digest.applied_index, 'every entry applied before is there (a new term adds its no-op)');
    const att2 = await issuer.sign(AGENT_A);
    t.equal((await second.api('GET', `/api/v1/transactions/${ids[39]}`, { token: att2 })).status, 200, 'the last intent reads back');
    t.equal((await second.api('POST', '/api/v1/intents', { body: envelope(att2, { minor: 99 }) })).status, 200, 'and intents go on');
  } finally {
    await second.close();
  }
});

t.test('a Raft log gone from beside a store that applied entries stops the start; put back, the node starts as it was', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-restart-lostwal-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const { digest } = await fortyIntents(dir);
  // As a volume not mounted at <data_dir>/wal: the directory is not there.
  renameSync(join(dir, 'wal'), join(dir, 'wal-aside'));
  await t.rejects(startTestNode(COMPACT_OFTEN, dir), {
    name: 'ConfigError',
    message: new RegExp(`^the Raft log \\(${join(dir, 'wal').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\) is empty, but the state store beside it has applied \\d+ entries: the log was lost`),
  });
  t.notOk(existsSync(join(dir, 'wal')), 'the refused start leaves no empty log in its place');
  renameSync(join(dir, 'wal-aside'), join(dir, 'wal'));
  const again = await startTestNode(COMPACT_OFTEN, dir);
  try {
    t.equal((await again.adm('operator', 'GET', '/admin/v1/log/digest')).body.state_hash, digest.state_hash, 'the log put back, it starts as it was');
  } finally {
    await again.close();
  }
});

t.test('a Raft log cut short behind a store that applied its entries stops the start, saying so', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-restart-cutwal-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = await startTestNode({}, dir);
  await bootstrap(first);
  const att = await first.issuer.sign(AGENT_A);
  for (let k = 0; k < 10; k++) t.equal((await first.api('POST', '/api/v1/intents', { body: envelope(att, { minor: 10 + k }) })).status, 200);
  const digest = (await first.adm('operator', 'GET', '/admin/v1/log/digest')).body as { applied_index: number; state_hash: string };
  const applied = digest.applied_index;
  await first.close();
  // The segment's records end where its zeros begin; 4 KiB of them are cut off, as a
  // damaged disk or a careless copy would: the log reads the rest as a torn write.
  const dataEnd = (file: string) => {
    const bytes = readFileSync(file);
    let end = bytes.length;
    while (end > 0 && bytes[end - 1] === 0) end--;
    return end;
  };
  const written = readdirSync(join(dir, 'wal')).filter((n) => n.endsWith('.wal')).sort().map((n) => join(dir, 'wal', n)).filter((f) => dataEnd(f) > 0);
  const segment = written.at(-1)!;
  const end = dataEnd(segment);
  t.ok(end > 8192, `the last segment written holds records (${end} bytes)`);
  truncateSync(segment, end - 4096);
  const refusal = new RegExp(`^the state store has applied entries up to index ${applied}, but the Raft log in .* ends at \\d+: entries that were durable and acknowledged are gone from the log`);
  const lines: string[] = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { lines.push(...chunk.toString().split('\n').filter(Boolean)); done(); } });
  await t.rejects(startTestNode({}, dir, createLogger('info', 'n1', sink)), { name: 'ConfigError', message: refusal }, 'a member would otherwise start on a configuration it made up');
  const dropped = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((r) => r.event === 'wal_tail_dropped');
  t.match(dropped, { level: 'warn', segment: basename(segment), bytes: Number }, 'the record cut in two is logged as dropped');
  t.ok((dropped?.offset as number) < end - 4096, 'where the last whole record ends');

  // A store received from a primary and installed just before a stop is ahead of the log
  // in the same way, and records the configuration it came with at the index it is at:
  // that one is taken, the snapshot the stop cut off is written, and the node starts.
  const identity = JSON.parse(readFileSync(join(dir, 'wal', 'identity.json'), 'utf8')) as { nodeId: string };
  const store = join(dir, 'ledger', readFileSync(join(dir, 'ledger', 'CURRENT'), 'utf8').trim());
  const record = async (receivedAt: number) => {
    const db = new Level<string, string>(store);
    await db.put('raft/conf', JSON.stringify({ ...confState([identity.nodeId]), received_at: receivedAt }));
    await db.close();
  };
  await record(applied - 1);
  await t.rejects(startTestNode({}, dir), { name: 'ConfigError', message: refusal }, 'not when the store applied entries after it was received');
  await record(applied);
  const again = await startTestNode({}, dir);
  try {
    t.equal((await again.adm('operator', 'GET', '/admin/v1/log/digest')).body.state_hash, digest.state_hash, 'a store received at its index is taken as it is');
    t.equal((await again.api('POST', '/api/v1/intents', { body: envelope(await first.issuer.sign(AGENT_A), { minor: 99 }) })).status, 200, 'and intents go on');
  } finally {
    await again.close();
  }
});

t.test('obligations in a state other than owed come in pages, in id order', async (t) => {
  const n = await startTestNode();
  try {
    await bootstrap(n);
    const att = await n.issuer.sign(AGENT_A);
    const created: string[] = [];
    for (let k = 0; k < 7; k++) {
      const r = await n.api('POST', '/api/v1/intents', { body: envelope(att, { minor: 100 + k, evidence: [EVIDENCE] }) });
      created.push(...r.body.provenance.obligations_created);
    }
    t.equal(created.length, 7);
    const seen: string[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const q: string = `/api/v1/obligations?state=open&limit=3${after === null ? '' : `&after=${encodeURIComponent(after)}`}`;
      const r = await n.api('GET', q, { token: att });
      t.equal(r.status, 200);
      t.ok(r.body.obligations.length <= 3);
      seen.push(...r.body.obligations.map((o: { id: string }) => o.id));
      after = r.body.next;
      pages++;
    } while (after !== null && pages < 10);
    t.same(seen, [...created].sort(), 'every open obligation once, in id order');
    t.equal(pages, 3);
    const owed = await n.api('GET', '/api/v1/obligations', { token: att });
    t.equal(owed.body.obligations.length, 7, 'the owed ones come in one page');
    t.equal(owed.body.next, null);
  } finally {
    await n.close();
  }
});
