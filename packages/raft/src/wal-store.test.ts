// Proves what the write-ahead log adds to the storage contract (which
// level-store.test.ts proves on every store): the log survives close and reopen across
// many segments; a compaction deletes the segments it covers and the snapshots before
// it; a torn record at the end of the last segment (a crash during a write that was
// never acknowledged) is dropped and zeroed, and writes go on after it; a damaged record
// with records after it, a missing segment and a missing or damaged snapshot file are
// refused, never skipped; a save larger than a segment gets a segment of its own.
import { appendFile, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { SaveBatch } from './storage.js';
import { bytes, ents } from './testing.js';
import type { HardState, Snapshot } from './types.js';
import { WalLogStore } from './wal-store.js';

async function tempDir(t: { teardown: (f: () => Promise<void>) => void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'apl-raft-wal-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const batch = (over: Partial<SaveBatch>): SaveBatch => ({ hardState: null, snapshot: null, entries: [], mustSync: true, ...over });
const hs = (term: number, vote: string | null, commit: number): HardState => ({ term, vote, commit });
const snapshot = (index: number, term: number): Snapshot => ({ meta: { index, term, conf: { voters: ['a', 'b', 'c'], learners: [], context: {} } }, data: bytes(`state@${index}`) });
const indexes = (b: { entries: { index: number }[] }) => b.entries.map((e) => e.index);
const segments = async (dir: string) => (await readdir(dir)).filter((n) => n.endsWith('.wal')).sort();
const SMALL = { segmentBytes: 4096 };

/** Writes entries 1..n, `per` to a save, each entry `size` bytes of data, term 1. */
async function fill(s: WalLogStore, n: number, per = 4, size = 100): Promise<void> {
  for (let i = 1; i <= n; i += per) {
    const count = Math.min(per, n - i + 1);
    const entries = Array.from({ length: count }, (_, k) => ({ index: i + k, term: 1, data: bytes(String(i + k).padEnd(size, '.')) }));
    await s.save(batch({ hardState: hs(1, 'a', i + count - 1), entries }));
  }
}

t.test('the log survives close and reopen, across many segments, and writes go on after it', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  await s.close();
  t.ok((await segments(dir)).length > 5, `${(await segments(dir)).length} segments`);
  s = await WalLogStore.open(dir, SMALL);
  let b = await s.load();
  t.same(indexes(b), Array.from({ length: 200 }, (_, k) => k + 1));
  t.same(b.hardState, hs(1, 'a', 200));
  t.equal(new TextDecoder().decode(b.entries[41]!.data).replace(/\.+$/, ''), '42', 'an entry keeps its data');
  // A conflicting write after reopening truncates the suffix.
  await s.save(batch({ hardState: hs(2, 'b', 150), entries: ents([2, 2], 151) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  b = await s.load();
  t.equal(b.entries.length, 152);
  t.same(b.entries.slice(-3).map((e) => [e.index, e.term]), [[150, 1], [151, 2], [152, 2]]);
  t.same(b.hardState, hs(2, 'b', 150));
  await s.close();
});

t.test('a compaction deletes the segments it covers and the snapshots before it; the log loads right', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  const before = await segments(dir);
  await s.saveSnapshot(snapshot(100, 1));
  await s.settled(); // the deletions run beside later writes
  const mid = await segments(dir);
  t.ok(mid.length < before.length, `${before.length} segments, then ${mid.length}`);
  t.ok(mid[0]! > before[0]!, 'the oldest segments are gone');
  await s.saveSnapshot(snapshot(190, 1));
  await s.settled();
  t.same(await readdir(join(dir, 'snap')), ['00000000000000be.snap'], 'only the newest snapshot is kept');
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.equal(b.snapshot?.meta.index, 190);
  t.same(new TextDecoder().decode(b.snapshot?.data), 'state@190');
  t.same(indexes(b), Array.from({ length: 10 }, (_, k) => 191 + k));
  await s.close();
});

t.test('a torn record at the end of the last segment is dropped and zeroed; writes go on after it', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 10);
  await s.close();
  // The last segment written (the one after it was made ahead of need, and is all zeros).
  const written = [];
  for (const n of await segments(dir)) if ((await readFile(join(dir, n))).subarray(0, 8).some((x) => x !== 0)) written.push(n);
  const path = join(dir, written.at(-1)!);
  const bytesOf = await readFile(path);
  let end = bytesOf.length;
  while (end > 0 && bytesOf[end - 1] === 0) end--;
  // The head of a record whose body never reached the disk: a length, a checksum, part of the body.
  const torn = Buffer.alloc(20);
  torn.writeUInt32BE(500, 0);
  torn.writeUInt32BE(0xdeadbeef, 4);
  torn.fill(7, 8);
  const fh = await open(path, 'r+');
  await fh.write(torn, 0, torn.length, end);
  await fh.close();

  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), Array.from({ length: 10 }, (_, k) => k + 1), 'the whole records load');
  t.equal((await readFile(path)).subarray(end, end + 20).some((x) => x !== 0), false, 'the torn record is zeroed');
  await s.save(batch({ hardState: hs(1, 'a', 11), entries: ents([1], 11) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), Array.from({ length: 11 }, (_, k) => k + 1), 'a write after it loads');
  await s.close();
});

t.test('a damaged record with records after it is corruption, not the end of the log', async (t) => {
  const dir = await tempDir(t);
  const s = await WalLogStore.open(dir, SMALL);
  await fill(s, 100);
  await s.close();
  const [first] = await segments(dir);
  const path = join(dir, first!);
  const b = await readFile(path);
  b[40] = b[40]! ^ 0xff;
  await writeFile(path, b);
  await t.rejects(WalLogStore.open(dir, SMALL), { name: 'LogStoreCorruptError', message: /an invalid record at byte \d+, and records after it/ });
});

t.test('a crash after a compaction\'s record, before its deletions, opens to the compacted log', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  await s.saveSnapshot(snapshot(50, 1));
  await s.settled();
  // What the deletions of the next compaction will remove, kept aside to put back.
  const kept = new Map<string, Buffer>();
  for (const n of await segments(dir)) kept.set(n, await readFile(join(dir, n)));
  for (const n of await readdir(join(dir, 'snap'))) kept.set(join('snap', n), await readFile(join(dir, 'snap', n)));
  await s.saveSnapshot(snapshot(150, 1));
  await s.close();
  const restored: string[] = [];
  for (const [n, bytes] of kept) {
    if ((await readdir(join(dir, n, '..'))).includes(n.split('/').at(-1)!)) continue;
    await writeFile(join(dir, n), bytes);
    restored.push(n);
  }
  t.ok(restored.length >= 2, `${restored.length} deleted files put back, as if the process had stopped before deleting them`);
  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.equal(b.snapshot?.meta.index, 150, 'the latest snapshot record wins');
  t.same(indexes(b), Array.from({ length: 50 }, (_, k) => 151 + k));
  await s.saveSnapshot(snapshot(180, 1));
  await s.settled();
  t.same(await readdir(join(dir, 'snap')), ['00000000000000b4.snap'], 'the next compaction deletes what was left');
  const left = await segments(dir);
  t.same(restored.filter((n) => left.includes(n)), [], 'and the segments put back (all at or below 150)');
  await s.close();
});

t.test('a missing segment, and a missing or damaged snapshot file, are refused', async (t) => {
  const dir = await tempDir(t);
  const s = await WalLogStore.open(dir, SMALL);
  await fill(s, 100);
  await s.saveSnapshot(snapshot(20, 1));
  await s.close();
  const names = await segments(dir);
  const middle = join(dir, names[Math.floor(names.length / 2)]!);
  const kept = await readFile(middle);
  await rm(middle);
  await t.rejects(WalLogStore.open(dir, SMALL), { name: 'LogStoreCorruptError', message: /is missing/ });
  await writeFile(middle, kept);

  const snap = join(dir, 'snap', '0000000000000014.snap');
  const good = await readFile(snap);
  await appendFile(snap, 'x');
  await t.rejects(WalLogStore.open(dir, SMALL), { name: 'LogStoreCorruptError', message: /checksum/ });
  await rm(snap);
  await t.rejects(WalLogStore.open(dir, SMALL), { name: 'LogStoreCorruptError', message: /is missing/ });
  await writeFile(snap, good);
  const again = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await again.load()), Array.from({ length: 80 }, (_, k) => k + 21), 'restored, it loads');
  await again.close();
});

t.test('a snapshot from the leader replaces the log, and stays the log after reopening', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 30);
  await s.save(batch({ hardState: hs(3, null, 50), snapshot: snapshot(50, 3) }));
  await s.save(batch({ hardState: hs(3, null, 51), entries: ents([3], 51) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.same([b.snapshot?.meta.index, b.snapshot?.meta.term], [50, 3]);
  t.same(b.entries.map((e) => [e.index, e.term]), [[51, 3]], 'the old entries are gone');
  await s.close();
});

t.test('a save larger than a segment gets a segment of its own', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 4);
  const big = { index: 5, term: 1, data: bytes('z'.repeat(10_000)) };
  await s.save(batch({ hardState: hs(1, 'a', 5), entries: [big] }));
  await fill(s, 0);
  await s.save(batch({ hardState: hs(1, 'a', 6), entries: ents([1], 6) }));
  await s.close();
  const sizes = await Promise.all((await segments(dir)).map(async (n) => (await stat(join(dir, n))).size));
  t.ok(sizes.some((x) => x > 10_000), `segment sizes ${sizes.join(', ')}`);
  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.same(indexes(b), [1, 2, 3, 4, 5, 6]);
  t.equal(b.entries[4]!.data.length, 10_000);
  await s.close();
});

t.test('segments made ahead of need and temporary files left by a crash are cleared at open', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 8);
  await s.close();
  const names = await segments(dir);
  t.ok(names.length >= 2, 'a spare was made ahead of need');
  await writeFile(join(dir, 'ffffffffffffffff.wal.tmp'), 'half a segment');
  await writeFile(join(dir, 'snap', '0000000000000001.snap.tmp'), 'half a snapshot');
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), [1, 2, 3, 4, 5, 6, 7, 8]);
  t.notOk((await readdir(dir)).includes('ffffffffffffffff.wal.tmp'), 'the temporary segment is gone');
  await s.save(batch({ hardState: hs(1, 'a', 9), entries: ents([1], 9) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  await s.close();
});

t.test('the identity is kept beside the log', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir);
  t.equal(await s.identity(), null);
  await s.bootstrap({ clusterId: 'c', nodeId: 'n1', members: ['n1', 'n2'] });
  await s.close();
  s = await WalLogStore.open(dir);
  t.same(await s.identity(), { clusterId: 'c', nodeId: 'n1', members: ['n1', 'n2'] });
  await s.close();
});
