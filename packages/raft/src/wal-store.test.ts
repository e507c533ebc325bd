// Proves what the write-ahead log adds to the storage contract (which
// level-store.test.ts proves on every store): the log survives close and reopen across
// many segments; a compaction deletes the segments it covers and the snapshots before
// it; a torn record at the end of the last segment (a crash during a write that was
// never acknowledged) is dropped and zeroed, and writes go on after it; a damaged record
// with records after it, a missing segment and a missing or damaged snapshot file are
// refused, never skipped; a save larger than a segment gets a segment of its own; a
// segment a compaction frees is used again, and what it held before never reads as the
// log, also after a crash; segments written before seeds are read and appended to as
// they were written, and never used again; a durable save is one write through O_DSYNC,
// with the bytes no sync has covered before it; a spare still all zeros is kept at
// open, and one a write reached is made again.
import { constants, readFileSync, readlinkSync } from 'node:fs';
import { appendFile, mkdtemp, open, readdir, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { crc32 } from 'node:zlib';
import { join } from 'node:path';
import t from 'tap';
import type { SaveBatch } from './storage.js';
import { bytes, ents } from './testing.js';
import type { HardState, Snapshot } from './types.js';
import { lastNonZero, WalLogStore } from './wal-store.js';

async function tempDir(t: { teardown: (f: () => Promise<void>) => void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'apl-raft-wal-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const batch = (over: Partial<SaveBatch>): SaveBatch => ({ hardState: null, snapshot: null, entries: [], mustSync: true, ...over });
const hs = (term: number, vote: string | null, commit: number): HardState => ({ term, vote, commit });
const snapshot = (index: number, term: number): Snapshot => ({ meta: { index, term, conf: { voters: ['a', 'b', 'c'], learners: [], context: {}, removed: [] } }, data: bytes(`state@${index}`) });
const indexes = (b: { entries: { index: number }[] }) => b.entries.map((e) => e.index);
const segments = async (dir: string) => (await readdir(dir)).filter((n) => n.endsWith('.wal')).sort();
const freed = async (dir: string) => (await readdir(dir)).filter((n) => n.endsWith('.free')).sort();
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
  t.same(s.droppedTail, { segment: written.at(-1), offset: end, bytes: 20 }, 'and what was dropped is told');
  await s.save(batch({ hardState: hs(1, 'a', 11), entries: ents([1], 11) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), Array.from({ length: 11 }, (_, k) => k + 1), 'a write after it loads');
  t.equal(s.droppedTail, null, 'a log that ends on a whole record drops nothing');
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

t.test('a damaged record in the last segment with more whole entries after it than one write holds is corruption', async (t) => {
  const dir = await tempDir(t);
  const s = await WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 });
  await fill(s, 3000, 4, 1000); // about 3 MB of entries, 4 KB a save, in one segment
  await s.close();
  const path = join(dir, (await segments(dir))[0]!);
  const b = await readFile(path);
  // The body of entry 500: about 2.5 MB of entries acknowledged after it.
  const data = b.indexOf(Buffer.from('500'.padEnd(20, '.')));
  const at = data + 5;
  b[at] = b[at]! ^ 0xff;
  await writeFile(path, b);
  await t.rejects(WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 }), {
    name: 'LogStoreCorruptError', message: /an invalid record at byte \d+, and whole entries after it from byte \d+ to \d+, more than the last write could hold/,
  });
  // Its length damaged too: the entries after it are still found.
  // The record's header is 8 bytes, its body's head 18 (type, index, term, kind) before the data.
  b.writeUInt32BE(0xfffffff0, data - 26);
  await writeFile(path, b);
  await t.rejects(WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 }), { name: 'LogStoreCorruptError' });
});

t.test('a save of more than a write holds is written in parts, each durable, and loads whole', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 });
  const entries = Array.from({ length: 3000 }, (_, k) => ({ index: k + 1, term: 1, data: bytes(String(k + 1).padEnd(1000, '.')) }));
  await s.save(batch({ hardState: hs(1, 'a', 3000), entries }));
  await s.close();
  s = await WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 });
  const upTo = (n: number) => Array.from({ length: n }, (_, k) => k + 1);
  t.same(indexes(await s.load()), upTo(3000));
  await s.close();
  // A torn last part (its last entry's body) is the log's end: the parts before it stay.
  const path = join(dir, (await segments(dir))[0]!);
  const b = await readFile(path);
  const at = b.indexOf(Buffer.from('3000'.padEnd(20, '.'))) + 10;
  b[at] = b[at]! ^ 0xff;
  await writeFile(path, b);
  s = await WalLogStore.open(dir, { segmentBytes: 16 * 1024 * 1024 });
  t.same(indexes(await s.load()), upTo(2999), 'the torn entry is dropped, as a torn write is');
  await s.close();
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

t.test('a spare still all zeros is kept at open, not made again; one a write reached is made again', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 8);
  await s.close();
  const names = await segments(dir);
  const spare = join(dir, names.at(-1)!);
  const made = await stat(spare);
  t.equal(made.size, SMALL.segmentBytes, 'the spare was made ahead of need');
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), [1, 2, 3, 4, 5, 6, 7, 8]);
  t.same(await segments(dir), names, 'no segment was added or dropped');
  t.equal((await stat(spare)).ino, made.ino, 'the spare is the file made before the restart');
  t.equal((await stat(spare)).mtimeMs, made.mtimeMs, 'and nothing wrote it again');
  await s.close();
  // A crash in the first write to a new segment can leave a later sector of it without the first.
  const fh = await open(spare, 'r+');
  await fh.write(new Uint8Array([7]), 0, 1, SMALL.segmentBytes - 1);
  await fh.close();
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), [1, 2, 3, 4, 5, 6, 7, 8]);
  await s.save(batch({ hardState: hs(1, 'a', 9), entries: ents([1], 9) }));
  await s.close();
  t.equal(lastNonZero(await readFile(spare), 0), -1, 'a spare a write reached is dropped and made again, of zeros');
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  // Written until the kept spare is taken: the log goes on into it, and reads back whole.
  const more = Array.from({ length: 60 }, (_, k) => ({ index: 10 + k, term: 1, data: bytes(String(10 + k).padEnd(100, '.')) }));
  for (let i = 0; i < more.length; i += 4) await s.save(batch({ hardState: hs(1, 'a', 10 + i + 3), entries: more.slice(i, i + 4) }));
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  t.same(indexes(await s.load()), Array.from({ length: 69 }, (_, k) => k + 1));
  t.ok((await segments(dir)).length > names.length, 'across the segments that followed');
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

/** A segment size above the tail open() zeroes (1 MiB), and entries that fill it in a few saves. */
const MIB2 = { segmentBytes: 2 * 1024 * 1024 };
const BIG = 300 * 1024;
const bigEntry = (index: number) => ({ index, term: 1, data: bytes(`${index}:`.padEnd(BIG, String(index % 10))) });
const saveBig = (s: WalLogStore, index: number) => s.save(batch({ hardState: hs(1, 'a', index), entries: [bigEntry(index)] }));
const inodes = async (dir: string, names: string[]) => new Map(await Promise.all(names.map(async (n) => [(await stat(join(dir, n))).ino, n] as const)));
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => from + k);

/** A store whose current segment was freed by a compaction and used again, with `n` entries in it. */
async function reusedSegment(t: Parameters<typeof tempDir>[0], n: number): Promise<{ dir: string; s: WalLogStore; last: number; path: string }> {
  const dir = await tempDir(t);
  const s = await WalLogStore.open(dir, MIB2);
  let last = 0;
  while (last < 40) await saveBig(s, ++last);
  const before = await inodes(dir, await segments(dir));
  await s.saveSnapshot(snapshot(30, 1));
  await s.settled();
  const free = await freed(dir);
  if (free.length !== 2) throw new Error(`freed segments kept: ${free.join(', ')}`);
  // Write until the segment of the newest entry is one of those freed, with n entries in it.
  const holding = async (index: number) => {
    for (const x of await segments(dir)) if ((await readFile(join(dir, x))).includes(`${index}:`)) return x;
    throw new Error(`entry ${index} is in no segment`);
  };
  for (;;) {
    await saveBig(s, ++last);
    const current = await holding(last);
    const was = before.get((await stat(join(dir, current))).ino);
    if (was !== undefined && was !== current && (n === 1 || (await holding(last - n + 1)) === current)) return { dir, s, last, path: join(dir, current) };
    if (last > 200) throw new Error('no freed segment was used again');
  }
}

t.test('a segment a compaction frees is used again as the next one, and its old records never read', async (t) => {
  const { dir, s, last, path } = await reusedSegment(t, 1);
  t.pass(`entry ${last} is in ${path.split('/').at(-1)}, a segment freed by the compaction and renamed`);
  const old = await readFile(path);
  let end = old.length;
  while (end > 0 && old[end - 1] === 0) end--;
  t.ok(end > old.length / 2, 'the records it held before are still on disk, behind the new ones');
  t.same(indexes(await s.load()), range(31, last), 'the log is what was written, and nothing of before');
  await s.close();
  const again = await WalLogStore.open(dir, MIB2);
  t.same(indexes(await again.load()), range(31, last), 'and so after reopening');
  await saveBig(again, last + 1);
  await again.close();
  const third = await WalLogStore.open(dir, MIB2);
  t.same(indexes(await third.load()), range(31, last + 1), 'writes go on after it');
  await third.close();
});

t.test('after a torn write in a segment used again, records after the torn one never come back', async (t) => {
  const { dir, s, last, path } = await reusedSegment(t, 1);
  // Two more writes in the segment, then the first of them damaged as a torn write
  // leaves it: the second is whole after it, and checks under the segment's seed.
  await saveBig(s, last + 1);
  await saveBig(s, last + 2);
  await s.close();
  t.equal((await segments(dir)).filter((x) => join(dir, x) > path).length, 1, 'the two writes are in the same segment (a spare after it)');
  const b = await readFile(path);
  const at = b.indexOf(Buffer.from(`${last + 1}:`)) + 100;
  b[at] = b[at]! ^ 0xff;
  await writeFile(path, b);

  let r = await WalLogStore.open(dir, MIB2);
  t.same(indexes(await r.load()), range(31, last), 'the log ends before the torn record');
  // The same entry written again has the same length: over the torn one, it would put
  // the whole record after it back at the end of the log.
  await saveBig(r, last + 1);
  await r.close();
  r = await WalLogStore.open(dir, MIB2);
  t.same(indexes(await r.load()), range(31, last + 1), `entry ${last + 2}, never acknowledged, does not come back`);
  await r.close();
});

t.test('a damaged record in a segment used again, with segments after it, is corruption', async (t) => {
  const { dir, s, last, path } = await reusedSegment(t, 2);
  let next = last + 1;
  while ((await segments(dir)).filter((x) => join(dir, x) > path).length < 2) await saveBig(s, next++);
  await s.close();
  const b = await readFile(path);
  const at = b.indexOf(Buffer.from(`${last}:`)) + 100;
  b[at] = b[at]! ^ 0xff;
  await writeFile(path, b);
  await t.rejects(WalLogStore.open(dir, MIB2), { name: 'LogStoreCorruptError', message: /an invalid record at byte \d+, and records after it/ });
});

/** A record as the log wrote it before seeds: its body's plain CRC-32. */
function legacyRecord(body: Uint8Array): Buffer {
  const out = Buffer.alloc(8 + body.length);
  out.writeUInt32BE(body.length, 0);
  out.writeUInt32BE(crc32(body), 4);
  out.set(body, 8);
  return out;
}

t.test('a segment written before seeds is read, appended to as it was written, and never used again', async (t) => {
  const dir = await tempDir(t);
  const hsBody = Buffer.concat([Buffer.from([2]), Buffer.from(JSON.stringify({ term: 1, vote: 'a', commit: 3 }))]);
  const entry = (index: number) => {
    const body = Buffer.alloc(18 + 100, '.');
    body[0] = 1;
    body.writeBigUInt64BE(BigInt(index), 1);
    body.writeBigUInt64BE(1n, 9);
    body[17] = 0;
    return legacyRecord(body);
  };
  const segment = Buffer.alloc(SMALL.segmentBytes);
  Buffer.concat([legacyRecord(hsBody), entry(1), entry(2), entry(3)]).copy(segment);
  await writeFile(join(dir, '0000000000000001.wal'), segment);

  let s = await WalLogStore.open(dir, SMALL);
  let b = await s.load();
  t.same(indexes(b), [1, 2, 3], 'its entries load');
  t.same(b.hardState, hs(1, 'a', 3));
  await s.save(batch({ hardState: hs(1, 'a', 4), entries: ents([1], 4) }));
  await s.close();
  const first = await readFile(join(dir, '0000000000000001.wal'));
  let pos = 0;
  let records = 0;
  for (;;) {
    const length = first.readUInt32BE(pos);
    if (length === 0) break;
    t.equal(first.readUInt32BE(pos + 4), crc32(first.subarray(pos + 8, pos + 8 + length)), `record ${++records} has a plain CRC-32`);
    pos += 8 + length;
  }
  t.equal(records, 6, 'the write went on in the same segment: the head, three entries, the new entry and hard state');

  s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  const legacyInode = (await stat(join(dir, '0000000000000001.wal'))).ino;
  await s.saveSnapshot(snapshot(150, 1));
  await s.settled();
  const free = await freed(dir);
  t.equal(free.length, 2, 'freed segments with seeds are kept');
  t.notOk(free.includes('0000000000000001.free'), 'the one without is not');
  t.notOk([...(await inodes(dir, await readdir(dir))).keys()].includes(legacyInode), 'it is deleted');
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  b = await s.load();
  t.same(indexes(b), range(151, 200));
  await s.close();
});

t.test('freed segments kept at a close are used again after reopening; more than two are deleted', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  await s.saveSnapshot(snapshot(190, 1));
  await s.settled();
  const free = await freed(dir);
  t.equal(free.length, 2, `two kept, of the segments freed: ${free.join(', ')}`);
  const kept = await inodes(dir, free);
  await s.close();
  await writeFile(join(dir, '0000000000000fff.free'), 'a freed segment of another size');
  s = await WalLogStore.open(dir, SMALL);
  t.notOk((await readdir(dir)).includes('0000000000000fff.free'), 'a freed file not of the segment size is deleted at open');
  const before = new Set(await segments(dir));
  await fill(s, 0);
  for (let i = 201; [...(await inodes(dir, await segments(dir))).keys()].filter((ino) => kept.has(ino)).length < 2; i++) {
    if (i > 400) throw new Error('the kept segments were not used again');
    await s.save(batch({ hardState: hs(1, 'a', i), entries: [{ index: i, term: 1, data: bytes('x'.repeat(100)) }] }));
  }
  t.pass('both kept segments became segments again');
  t.ok((await segments(dir)).some((x) => !before.has(x)), 'as new segment numbers');
  await s.close();
  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.equal(b.entries[0]!.index, 191);
  t.same(indexes(b), range(191, b.entries.at(-1)!.index), 'the log is contiguous after the snapshot');
  await s.close();
});

t.test('a spare found at open that is a freed segment used again is dropped, and the next spare is another freed one, not a new file', async (t) => {
  const dir = await tempDir(t);
  let s = await WalLogStore.open(dir, SMALL);
  await fill(s, 200);
  await s.saveSnapshot(snapshot(190, 1));
  await s.settled();
  const kept = await inodes(dir, await freed(dir));
  t.equal(kept.size, 2);
  // Written until a freed segment is the spare: the one after the last that holds records.
  for (let i = 201; ; i++) {
    const names = await segments(dir);
    const spare = (await inodes(dir, names.slice(-1))).keys().next().value!;
    if (kept.has(spare) && (await freed(dir)).length === 1) break;
    if (i > 400) throw new Error('no freed segment became the spare');
    await s.save(batch({ hardState: hs(1, 'a', i), entries: [{ index: i, term: 1, data: bytes('x'.repeat(100)) }] }));
  }
  const last = (await s.load()).entries.at(-1)!.index;
  await s.close();
  const spare = (await segments(dir)).at(-1)!;
  s = await WalLogStore.open(dir, SMALL);
  t.equal((await s.load()).entries.at(-1)!.index, last);
  await s.close();
  t.same(await freed(dir), [], 'the other freed segment became the spare');
  const now = await inodes(dir, (await segments(dir)).slice(-1));
  t.equal((await segments(dir)).at(-1), spare, 'under the same number');
  t.ok(kept.has(now.keys().next().value!), 'the file of a freed segment, not a new one');
});

t.test('a durable save is one write through O_DSYNC, with the bytes no sync covered before it', { skip: process.platform !== 'linux' && 'reads /proc/self' }, async (t) => {
  const dir = await tempDir(t);
  // Every write and sync on a segment (not the spare's zeros, on its temporary name), in order.
  const calls: { op: string; at?: number; length?: number }[] = [];
  const probe = await open(join(dir, 'probe'), 'w');
  const proto = Object.getPrototypeOf(probe) as FileHandle;
  await probe.close();
  const { write, datasync } = proto;
  const onSegment = (fh: FileHandle) => readlinkSync(`/proc/self/fd/${fh.fd}`).endsWith('.wal');
  proto.write = function (this: FileHandle, ...args: unknown[]) {
    if (onSegment(this)) {
      const flags = Number.parseInt(/^flags:\s*([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${this.fd}`, 'utf8'))![1]!, 8);
      const [, , length, at] = args as [Uint8Array, number, number, number];
      calls.push({ op: (flags & constants.O_DSYNC) === constants.O_DSYNC ? 'dsync-write' : 'write', at, length });
    }
    return (write as (...a: unknown[]) => unknown).apply(this, args);
  } as FileHandle['write'];
  proto.datasync = function (this: FileHandle) {
    if (onSegment(this)) calls.push({ op: 'datasync' });
    return datasync.call(this);
  };
  t.teardown(() => {
    proto.write = write;
    proto.datasync = datasync;
  });
  const took = async (save: () => Promise<void>) => {
    calls.length = 0;
    await save();
    return [...calls];
  };
  const ops = (c: { op: string }[]) => c.map((x) => x.op);
  const end = (c: { at?: number; length?: number }) => c.at! + c.length!;
  const entry = (i: number, size = 8) => ({ index: i, term: 1, data: bytes(`entry ${i}`.padEnd(size, '.')) });

  let s = await WalLogStore.open(dir, SMALL);
  let c = await took(() => s.save(batch({ hardState: hs(1, 'a', 0), entries: [entry(1)] })));
  t.same(ops(c), ['write', 'dsync-write'], 'a new segment\'s head is written, then the save with it');
  t.same([c[1]!.at, c[1]!.length! > c[0]!.length!], [0, true], 'from the head on');
  c = await took(() => s.save(batch({ hardState: hs(1, 'a', 1), entries: [entry(2)] })));
  t.same(ops(c), ['dsync-write'], 'a durable save alone: one write');
  const unsynced = await took(() => s.save(batch({ hardState: hs(1, 'a', 2), mustSync: false })));
  t.same(ops(unsynced), ['write'], 'a save that need not be durable is not synced');
  t.equal(unsynced[0]!.at, end(c[0]!), 'and follows the last');
  c = await took(() => s.save(batch({ hardState: hs(1, 'a', 2), entries: [entry(3)] })));
  t.same(ops(c), ['dsync-write'], 'the next durable save is one write...');
  t.equal(c[0]!.at, unsynced[0]!.at, '...from the bytes no sync covered');
  t.equal(c[0]!.length! - unsynced[0]!.length!, (await took(() => s.save(batch({ hardState: hs(1, 'a', 3), entries: [entry(4)] }))))[0]!.length, 'they, and its own');
  await s.close();

  s = await WalLogStore.open(dir, SMALL);
  t.same(ops(await took(() => s.save(batch({ hardState: hs(1, 'a', 4), entries: [entry(5)] })))), ['write', 'datasync'], 'after reopening, what was read may not be durable: the first durable save syncs the segment');
  t.same(ops(await took(() => s.save(batch({ hardState: hs(1, 'a', 5), entries: [entry(6)] })))), ['dsync-write']);
  await s.close();

  // More unsynced bytes than are kept to be written again: the segment is synced whole.
  s = await WalLogStore.open(dir, { segmentBytes: 1024 * 1024 });
  await s.save(batch({ hardState: hs(1, 'a', 6), entries: [entry(7)] }));
  for (let i = 8; i < 8 + 70; i++) await s.save(batch({ entries: [entry(i, 1000)], mustSync: false }));
  t.same(ops(await took(() => s.save(batch({ hardState: hs(1, 'a', 77), entries: [entry(78)] })))), ['write', 'datasync'], 'past 64 KiB of them, a durable save syncs the segment');
  t.same(ops(await took(() => s.save(batch({ hardState: hs(1, 'a', 78), entries: [entry(79)] })))), ['dsync-write']);
  await s.close();

  s = await WalLogStore.open(dir, SMALL);
  const b = await s.load();
  t.same(indexes(b), range(1, 79));
  t.same(b.hardState, hs(1, 'a', 78));
  await s.close();
});

t.test('the last non-zero byte of a tail is found as a byte-by-byte scan finds it, at any alignment', async (t) => {
  const naive = (b: Uint8Array, from: number) => {
    for (let i = b.length - 1; i >= from; i--) if (b[i] !== 0) return i;
    return -1;
  };
  // A fixed sequence of cases (a linear congruential generator): lengths 0 to 40 bytes,
  // views at every offset of their buffer, zero to three non-zero bytes, every start.
  let seed = 12345;
  const next = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % n);
  let cases = 0;
  let mismatches = 0;
  for (let len = 0; len <= 40; len++) {
    for (let offset = 0; offset < 4; offset++) {
      for (let k = 0; k < 4; k++) {
        const b = new Uint8Array(new ArrayBuffer(len + offset + 3), offset, len);
        for (let j = 0; j < k && len > 0; j++) b[next(len)] = 1 + next(255);
        for (let from = 0; from <= len; from++) {
          cases++;
          if (lastNonZero(b, from) !== naive(b, from)) mismatches++;
        }
      }
    }
  }
  t.equal(mismatches, 0, `${cases} cases`);
  const big = new Uint8Array(8 << 20);
  t.equal(lastNonZero(big, 0), -1, 'a tail of zeros has none');
  big[12345] = 9;
  t.equal(lastNonZero(big, 100), 12345);
  t.equal(lastNonZero(big, 12346), -1, 'nothing at or after the start');
});
