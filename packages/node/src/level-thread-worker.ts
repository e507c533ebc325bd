/**
 * The thread that owns the state store's LevelDB (see level-thread.ts): it takes the
 * requests the event loop posts, in the order they arrive, and answers each with its
 * id. Iterators and snapshots live here and are named by numbers the caller chose.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Level } from 'level';
import type { LevelRequest, LevelResponse } from './level-thread.js';

type Snapshot = ReturnType<Level<string, string>['snapshot']>;
type Iterator = ReturnType<Level<string, string>['iterator']>;

const { path, options } = workerData as { path: string; options: Record<string, unknown> };
const db = new Level<string, string>(path, options);
const iterators = new Map<number, Iterator>();
const snapshots = new Map<number, Snapshot>();
const port = parentPort!;

port.on('message', (m: LevelRequest) => {
  // handle() runs synchronously up to its first await, so an iterator or a snapshot is
  // made before the next request (which may use it) is taken.
  handle(m).then(
    (value) => port.postMessage({ id: m.id, ok: true, value } satisfies LevelResponse),
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
  switch (m.op) {
    case 'open':
      return db.open();
    case 'close':
      for (const it of iterators.values()) await it.close();
      iterators.clear();
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
      iterators.set(m.it, db.iterator({ ...m.range, ...at(m.snapshot) }));
      return undefined;
    case 'next': {
      const it = iterators.get(m.it);
      if (!it) throw new Error(`no iterator ${m.it} is open`);
      return it.nextv(m.size);
    }
    case 'closeIterator': {
      const it = iterators.get(m.it);
      iterators.delete(m.it);
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
