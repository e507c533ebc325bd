// Proves a store streamed between two members marks its last chunk, and that a
// receiver tells a stream cut short from a whole one: with two meshes in one process,
// a stream of three chunks arrives whole and is reported installed; a stream that ends
// before the chunk marked last (as one cut by its sender's death ends) is refused as
// cut, naming the sender; a chunk after the last is refused; and a sender that predates
// the mark is still heard, its stream judged by the store's state hash alone. And that a
// sender whose transfer the receiver refuses part-way stops reading its store, so that
// the store's read (a LevelDB snapshot, in a node) is closed, not held for ever.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { Metrics, PEER_SERVICE, PeerMesh, createLogger, type MeshHandlers, type SnapshotChunk } from '@apl/node';
import { messageCodec, type Message } from '@apl/raft';
import { freePort } from './support/cluster.js';
import { testCerts } from './support/node.js';

const certs = testCerts();
const CLUSTER = 'apl-snapshot-test';
const pem = (id: string) => ({ ca: readFileSync(certs.ca), cert: readFileSync(join(certs.dir, `${id}.pem`)), key: readFileSync(join(certs.dir, `${id}-key.pem`)) });
const position = { applied: 40, term: 3, stateHash: 'ab'.repeat(32) };
const snap: Message = {
  type: 'snap', from: 'n1', to: 'n2', term: 3, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0,
  snapshot: { meta: { index: 40, term: 3, conf: { voters: ['n1', 'n2'], learners: [], context: {}, removed: [] } }, data: new Uint8Array() },
};
const chunk = (seq: number): SnapshotChunk => ({ seq, data: Buffer.from(`chunk ${seq}`), digest: `digest ${seq}` });

/** What a receiving member was handed: the chunks it read, and how reading them ended. */
interface Received { seqs: number[]; outcome: Promise<string> }

async function mesh(id: 'n1' | 'n2', ports: { n1: number; n2: number }, handlers: Partial<MeshHandlers>): Promise<PeerMesh> {
  const m = new PeerMesh({
    self: id,
    members: [{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }, { id: 'n2', peer_addr: `127.0.0.1:${ports.n2}` }],
    clusterId: CLUSTER, host: '127.0.0.1', port: ports[id], tls: pem(id),
    queueMessagesMax: 64, snapshotTimeoutMs: 5_000, log: createLogger('silent', id), metrics: new Metrics(),
  });
  const unused = () => {
    throw new Error('not used by this test');
  };
  await m.listen({ step: () => undefined, installSnapshot: unused, openSnapshot: unused, propose: unused, proposeConfChange: unused, reportSnapshot: () => undefined, reportUnreachable: () => undefined, superseded: unused, ...handlers });
  return m;
}

/** A receiving member n2 that reads every chunk it is handed and installs what it read. */
async function receiver(ports: { n1: number; n2: number }): Promise<{ mesh: PeerMesh; received: Received[] }> {
  const received: Received[] = [];
  const m = await mesh('n2', ports, {
    installSnapshot: (_m, _position, chunks) => {
      const r: Received = { seqs: [], outcome: Promise.resolve('') };
      received.push(r);
      const reading = (async () => {
        for await (const c of chunks) r.seqs.push(c.seq);
      })();
      r.outcome = reading.then(() => 'installed', (err: Error) => err.message);
      return reading;
    },
  });
  return { mesh: m, received };
}

/** Streams `chunks` to n2 as n1 would, with `marksLast` on the first and `last` where given; answers n2's acknowledgement. */
function stream(port: number, chunks: { seq: number; last?: boolean }[], marksLast: boolean): Promise<{ installed: boolean; reason: string }> {
  const credentials = grpc.credentials.createFromSecureContext(createSecureContext({ ...pem('n1'), minVersion: 'TLSv1.3' }), { checkServerIdentity: () => undefined });
  const client = new grpc.Client(`127.0.0.1:${port}`, credentials, { 'grpc.ssl_target_name_override': 'n2' });
  const message = messageCodec(CLUSTER).encode(snap);
  return new Promise((resolve, reject) => {
    const call = client.makeClientStreamRequest(PEER_SERVICE.snapshot.path, PEER_SERVICE.snapshot.requestSerialize, PEER_SERVICE.snapshot.responseDeserialize, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err, ack) => {
      client.close();
      if (err) reject(err);
      else resolve(ack as { installed: boolean; reason: string });
    });
    chunks.forEach((c, i) => call.write({ ...chunk(c.seq), last: c.last === true, ...(i === 0 ? { message, position, marksLast } : {}) }));
    call.end();
  });
}

t.test('a member streams its store with the last chunk marked, and the receiver installs it', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const { mesh: n2, received } = await receiver(ports);
  const reports: string[] = [];
  let report: () => void = () => undefined;
  const reported = new Promise<void>((r) => (report = r));
  const n1 = await mesh('n1', ports, {
    openSnapshot: async () => ({ position: { ...position, tick: 0, head: '00'.repeat(32) }, chunks: (async function* () { for (let seq = 0; seq < 3; seq++) yield chunk(seq); })() }),
    reportSnapshot: (to, outcome) => {
      reports.push(`${to} ${outcome}`);
      report();
    },
  });
  t.teardown(async () => {
    await n1.close();
    await n2.close();
  });
  n1.send([snap]);
  await reported;
  t.same(reports, ['n2 finish'], 'the sender is told the store was installed');
  t.same(received.map((r) => r.seqs), [[0, 1, 2]], 'the receiver read the three chunks');
  t.equal(await received[0]!.outcome, 'installed');
});

t.test('a stream that ends before the chunk marked last is refused as cut; so is a chunk after the last', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const { mesh: n2, received } = await receiver(ports);
  t.teardown(() => n2.close());

  const cut = await stream(ports.n2, [{ seq: 0 }, { seq: 1 }], true);
  t.equal(cut.installed, false);
  t.match(cut.reason, /^the stream ended after 2 chunks, before the one marked last: it was cut \(the sender n1 stopped, or the connection failed\)$/, 'refused as cut, the sender named');
  t.same(received[0]!.seqs, [0, 1], 'after the chunks it did receive');

  const after = await stream(ports.n2, [{ seq: 0 }, { seq: 1, last: true }, { seq: 2 }], true);
  t.equal(after.installed, false);
  t.match(after.reason, /^snapshot chunk 2 arrived after the one marked last$/);

  const whole = await stream(ports.n2, [{ seq: 0 }, { seq: 1, last: true }], true);
  t.same(whole, { installed: true, reason: '' }, 'the same stream whole is installed');
});

t.test('a sender that predates the mark is heard: its stream ends where it ends', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const { mesh: n2, received } = await receiver(ports);
  t.teardown(() => n2.close());
  const old = await stream(ports.n2, [{ seq: 0 }, { seq: 1 }], false);
  t.same(old, { installed: true, reason: '' }, 'left to the store, which checks the state hash');
  t.same(received[0]!.seqs, [0, 1]);
});

t.test('a transfer the receiver refuses part-way closes the sender\'s read of its store', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const n2 = await mesh('n2', ports, {
    installSnapshot: async (_m, _position, chunks) => {
      for await (const _ of chunks) throw new Error('a store is being received already');
    },
  });
  // More chunks than the call buffers (grpc-js takes 16 before it asks the writer to
  // wait): the sender is waiting for the call to drain when the refusal comes.
  let closed: () => void = () => undefined;
  const released = new Promise<void>((r) => (closed = r));
  let read = 0;
  let report: (outcome: string) => void = () => undefined;
  const reported = new Promise<string>((r) => (report = r));
  const n1 = await mesh('n1', ports, {
    openSnapshot: async () => ({
      position: { ...position, tick: 0, head: '00'.repeat(32) },
      chunks: (async function* () {
        try {
          for (let seq = 0; seq < 64; seq++) {
            read++;
            yield { seq, data: Buffer.alloc(1 << 20, seq), digest: `digest ${seq}` };
          }
        } finally {
          closed();
        }
      })(),
    }),
    reportSnapshot: (_to, outcome) => report(outcome),
  });
  t.teardown(async () => {
    await n1.close();
    await n2.close();
  });
  n1.send([snap]);
  t.equal(await reported, 'failure', 'the sender is told the transfer failed');
  const within = await Promise.race([released.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref())]);
  t.ok(within, 'and the read of its store is closed');
  t.ok(read < 64, `after ${read} chunks of 64: the rest were never read`);
});
