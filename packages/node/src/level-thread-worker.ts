/**
 * The thread that owns the state store's LevelDB (see level-thread.ts): it takes the
 * requests the event loop posts, in the order they arrive, and answers each with its
 * id. Iterators and snapshots live here and are named by numbers the caller chose.
 * The first request, `open`, names the store's directory: the thread may start before
 * the node knows it (main.ts starts one first thing).
 */
import { parentPort } from 'node:worker_threads';
import { Level } from 'level';
import type { LevelRequest, LevelResponse } from './level-thread.js';
import { encodeFrames, readChunk, type FramedChunk, type FramesWritten } from './store-frames.js';

type Snapshot = ReturnType<Level<string, string>['snapshot']>;
type Iterator = ReturnType<Level<string, string>['iterator']>;
type RawIterator = ReturnType<typeof openRaw>;

/** The store's LevelDB, made by the first request (`open`), which names it. */
let db!: Level<string, string>;
const iterators = new Map<number, Iterator>();
/** Iterators opened `raw` (keys and values as bytes), each with the entries it read beyond the last chunk. */
const raw = new Map<number, { it: RawIterator; entries: [Buffer, Buffer][]; at: number }>();
const snapshots = new Map<number, Snapshot>();
const port = parentPort!;

port.on('message', (m: LevelRequest) => {
  // handle() runs synchronously up to its first await, so an iterator or a snapshot is
  // made before the next request (which may use it) is taken.
  handle(m).then(
    // A chunk's bytes are moved to the event loop's thread, not copied (encodeFrames
    // gives each its own buffer).
    (value) => port.postMessage({ id: m.id, ok: true, value } satisfies LevelResponse, m.op === 'frames' && value !== null ? [(value as FramedChunk).data.buffer as ArrayBuffer] : []),
    (err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      port.postMessage({ id: m.id, ok: false, error: { message: e.message, code: (e as { code?: unknown }).code } } satisfies LevelResponse);
    },
  );
});

function at(snapshot: number | undefined): { snapshot?: Snapshot } {
  if (snapshot === undefined) return {};
  const s = snapshots.get(snapshot);
  if (!s) throw new Error(`no snapshot ${snapshot} is open`);
  return { snapshot: s };
}

async function handle(m: LevelRequest): Promise<unknown> {
  if (m.op !== 'open' && db === undefined) throw new Error(`the store is not open (${m.op} before open)`);
  switch (m.op) {
    case 'open':
      db = new Level<string, string>(m.path, m.options as Record<string, unknown>);
      return db.open();
    case 'close':
      for (const it of iterators.values()) await it.close();
      iterators.clear();
      for (const r of raw.values()) await r.it.close();
      raw.clear();
      for (const s of snapshots.values()) await s.close();
      snapshots.clear();
      return db.close();
    case 'get':
      return db.get(m.key, at(m.snapshot));
    case 'getMany':
      return db.getMany(m.keys);
    case 'batch': {
      const { keys, values } = m;
      const ops = keys.map((key, i) => {
        const value = values[i];
        return value === null ? { type: 'del' as const, key } : { type: 'put' as const, key, value: value! };
      });
      return db.batch(ops, m.sync ? { sync: true } : {});
    }
    case 'keys':
      return db.keys(m.range).all();
    case 'iterator':
      if (m.raw) raw.set(m.it, { it: openRaw(m.snapshot), entries: [], at: 0 });
      else iterators.set(m.it, db.iterator({ ...m.range, ...at(m.snapshot) }));
      return undefined;
    case 'frames':
      return frames(m.it, m.bytes);
    case 'putFrames':
      return putFrames(m);
    case 'next': {
      const it = iterators.get(m.it);
      if (!it) throw new Error(`no iterator ${m.it} is open`);
      return it.nextv(m.size);
    }
    case 'closeIterator': {
      const it = iterators.get(m.it) ?? raw.get(m.it)?.it;
      iterators.delete(m.it);
      raw.delete(m.it);
      return it?.close();
    }
    case 'snapshot':
      snapshots.set(m.snapshot, db.snapshot());
      return undefined;
    case 'closeSnapshot': {
      const s = snapshots.get(m.snapshot);
      snapshots.delete(m.snapshot);
      return s?.close();
    }
  }
}

/** An iterator over the whole store (at `snapshot`) that reads keys and values as bytes. */
function openRaw(snapshot: number | undefined) {
  return db.iterator<Buffer, Buffer>({ keyEncoding: 'buffer', valueEncoding: 'buffer', ...at(snapshot) });
}

/** The next chunk of a raw iterator's records, of at least `bytes` unless the store ends first; null after the last. */
async function frames(it: number, bytes: number): Promise<FramedChunk | null> {
  const r = raw.get(it);
  if (!r) throw new Error(`no iterator ${it} is open`);
  const records: [Buffer, Buffer][] = [];
  let size = 0;
  while (size < bytes) {
    if (r.at === r.entries.length) {
      r.entries = (await r.it.nextv(256)) as [Buffer, Buffer][];
      r.at = 0;
      if (r.entries.length === 0) break;
    }
    const e = r.entries[r.at++]!;
    records.push(e);
    size += 8 + e[0].length + e[1].length;
  }
  return records.length === 0 ? null : encodeFrames(records);
}

/** Writes a received chunk's records as they came, after checking its digest; answers what readChunk found. */
async function putFrames(m: Extract<LevelRequest, { op: 'putFrames' }>): Promise<FramesWritten> {
  const { records, sum, meta } = readChunk(m, m.hashed, m.metaKey);
  await db.batch<Buffer, Buffer>(records.map(([key, value]) => ({ type: 'put', key, value })), { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  return { sum: sum.toString(16), meta };
}
