/**
 * One side of the snapshot benchmark (snapshot.bench.ts), in a process of its own as a
 * member is: a peer mesh of member n1 or n2 and a state store.
 *
 *   node snapshot-peer.js recv <node dist> <cert dir> <n1 port> <n2 port> <store dir>
 *   node snapshot-peer.js send <node dist> <cert dir> <n1 port> <n2 port> <store dir> <transfers>
 *
 * The receiver writes every store it is sent into `<store dir>` (checked against the
 * announced state hash, then removed, not installed) and prints a line of JSON per
 * store; the sender streams its store `<transfers>` times, one after another, and prints
 * a line of JSON per transfer. Each line gives the time, and the CPU of the whole
 * process and of its JavaScript thread (the event loop that runs Raft and `apply` in a
 * node). `<node dist>` is a build's packages/node/dist, to measure another build.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type * as NodePackage from '@apl/node';
import type { Message } from '@apl/raft';
import { cpuSeconds } from './proc.js';

const [role, dist, certDir, n1Port, n2Port, storeDir, transfers] = process.argv.slice(2) as [string, string, string, string, string, string, string?];
const node = (await import(join(dist, 'index.js'))) as typeof NodePackage;
const self = role === 'send' ? 'n1' : 'n2';
const ports = { n1: Number(n1Port), n2: Number(n2Port) };
const pem = (id: string) => ({ ca: readFileSync(join(certDir, 'ca.pem')), cert: readFileSync(join(certDir, `${id}.pem`)), key: readFileSync(join(certDir, `${id}-key.pem`)) });
const mesh = new node.PeerMesh({
  self, members: [{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }, { id: 'n2', peer_addr: `127.0.0.1:${ports.n2}` }],
  clusterId: 'apl-snapshot-bench', host: '127.0.0.1', port: ports[self], tls: pem(self),
  queueMessagesMax: 64, snapshotTimeoutMs: 600_000, log: node.createLogger('warn', self), metrics: new node.Metrics(),
});
const store = await node.LedgerStore.open(storeDir, { cacheEntriesMax: 1000 });
const unused = () => {
  throw new Error('not used by the benchmark');
};

/** Times `run` with this process's CPU and its JavaScript thread's. */
async function timed<T>(run: () => Promise<T>): Promise<{ value: T; ms: number; cpuMs: number; loopCpuMs: number }> {
  const [t0, c0, l0] = [performance.now(), cpuSeconds(process.pid), cpuSeconds(process.pid, process.pid)];
  const value = await run();
  return { value, ms: performance.now() - t0, cpuMs: (cpuSeconds(process.pid) - c0) * 1000, loopCpuMs: (cpuSeconds(process.pid, process.pid) - l0) * 1000 };
}

if (role === 'recv') {
  await mesh.listen({
    step: () => undefined, openSnapshot: unused, propose: unused, proposeConfChange: unused, reportSnapshot: () => undefined, reportUnreachable: () => undefined, superseded: unused,
    installSnapshot: async (_m, position, chunks) => {
      const r = await timed(() => store.receiveSnapshot({ stateHash: position.stateHash, applied: position.applied }, chunks));
      rmSync(join(storeDir, r.value), { recursive: true, force: true });
      console.log(JSON.stringify({ ms: r.ms, cpuMs: r.cpuMs, loopCpuMs: r.loopCpuMs }));
    },
  });
  console.log(JSON.stringify({ ready: true }));
  process.on('SIGTERM', () => void mesh.close().then(() => store.close()).then(() => process.exit(0)));
} else {
  let reported: (outcome: string) => void = () => undefined;
  let bytes = 0;
  await mesh.listen({
    step: () => undefined, installSnapshot: unused, propose: unused, proposeConfChange: unused, reportUnreachable: () => undefined, superseded: unused,
    openSnapshot: async () => {
      const { position, chunks } = await store.openSnapshot();
      return { position, chunks: (async function* () {
        for await (const c of chunks) {
          bytes += c.data.length;
          yield c;
        }
      })() };
    },
    reportSnapshot: (_to, outcome) => reported(outcome),
  });
  const snap: Message = {
    type: 'snap', from: 'n1', to: 'n2', term: 1, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0,
    snapshot: { meta: { index: store.position.applied, term: 1, conf: { voters: ['n1', 'n2'], learners: [], context: {}, removed: [] } }, data: new Uint8Array() },
  };
  for (let i = 0; i < Number(transfers); i++) {
    bytes = 0;
    const r = await timed(() => new Promise<string>((resolve) => {
      reported = resolve;
      mesh.send([snap]);
    }));
    console.log(JSON.stringify({ outcome: r.value, bytes, ms: r.ms, cpuMs: r.cpuMs, loopCpuMs: r.loopCpuMs }));
    if (r.value !== 'finish') process.exit(1);
  }
  await mesh.close();
  await store.close();
  process.exit(0);
}
