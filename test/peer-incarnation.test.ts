// Proves that one process at a time runs as a member, as its peers see it. Every call
// names the caller's start (its data directory's start count) and a random tag. With
// meshes in one process, two of them as member n2 calling n1: a later start ends the
// earlier one's open streams, Raft's and the forwarding one, and the earlier process is
// told, with who superseded it; an earlier start's calls are then refused and its
// messages never reach Raft, with one error line and a count; a start put back from
// an older copy is refused at its first call; two processes of one start are told
// apart by their tags, the later going on whichever called first; a caller that names
// no start (an earlier release) is heard; a malformed start is refused; and a process
// of another cluster under the same CA and member id is refused before its start is
// looked at.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { compareIncarnations, createLogger, Metrics, parseIncarnation, PEER_SERVICE, PeerMesh, type MeshHandlers } from '@apl/node';
import type { Message } from '@apl/raft';
import { freePort } from './support/cluster.js';
import { testCerts } from './support/node.js';

const certs = testCerts();
const CLUSTER = 'apl-incarnation-test';
const pem = (id: string) => ({ ca: readFileSync(certs.ca), cert: readFileSync(join(certs.dir, `${id}.pem`)), key: readFileSync(join(certs.dir, `${id}-key.pem`)) });

/** A mesh as it runs, with what it was handed: the messages stepped, the supersessions told, its log lines. */
interface Peer {
  mesh: PeerMesh;
  stepped: Message[];
  superseded: { peer: string; details: string }[];
  lines: Record<string, unknown>[];
  metrics: Metrics;
}

/**
 * A mesh as member `id` listening on `port`, in a cluster of n1 and n2 whose n2 is
 * reached at `ports.n2` (a second process as n2 listens elsewhere, as a copy started on
 * another host would). `starts` is its start count; none names no start.
 */
async function peer(t: { teardown(f: () => unknown): void }, id: 'n1' | 'n2', port: number, ports: { n1: number; n2: number }, starts?: number, handlers: Partial<MeshHandlers> = {}, clusterId = CLUSTER): Promise<Peer> {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const metrics = new Metrics();
  const mesh = new PeerMesh({
    self: id,
    members: [{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }, { id: 'n2', peer_addr: `127.0.0.1:${ports.n2}` }],
    clusterId, host: '127.0.0.1', port, tls: pem(id),
    queueMessagesMax: 64, snapshotTimeoutMs: 5_000, log: createLogger('info', id, sink), metrics,
  });
  if (starts !== undefined) mesh.setStarts(starts);
  const p: Peer = { mesh, stepped: [], superseded: [], lines, metrics };
  const unused = () => {
    throw new Error('not used by this test');
  };
  await mesh.listen({
    step: (m) => p.stepped.push(m), installSnapshot: unused, openSnapshot: unused, propose: unused, proposeConfChange: unused,
    reportSnapshot: () => undefined, reportUnreachable: () => undefined,
    superseded: (from, details) => p.superseded.push({ peer: from, details }),
    ...handlers,
  });
  t.teardown(() => mesh.close());
  return p;
}

/** A Raft message from n2 to n1, told apart by its term. */
const fromN2 = (term: number): Message => ({ type: 'heartbeatResp', from: 'n2', to: 'n1', term, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0 });

async function until(what: string, ok: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Sends one message from `p` to n1 until n1 has stepped it or `p` is told it is superseded. */
async function deliver(p: Peer, n1: Peer, term: number): Promise<'stepped' | 'superseded'> {
  const told = p.superseded.length;
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    p.mesh.send([fromN2(term)]);
    await new Promise((r) => setTimeout(r, 30));
    if (n1.stepped.some((m) => m.term === term)) return 'stepped';
    if (p.superseded.length > told) return 'superseded';
  }
  throw new Error(`the message of term ${term} was neither stepped nor refused`);
}

const refusals = async (p: Peer) => (await p.metrics.registry.getSingleMetric('apl_peer_refused_total')!.get()).values.find((v) => v.labels.reason === 'superseded')?.value;

t.test('incarnations: read from a call, and ordered by start, then by tag', async (t) => {
  t.same(parseIncarnation('7.0123456789abcdef'), { starts: 7, tag: '0123456789abcdef' });
  for (const bad of ['', '7', '0.0123456789abcdef', '07.0123456789abcdef', '7.0123456789ABCDEF', '7.0123456789abcde', '1234567890123456.0123456789abcdef', '-1.0123456789abcdef', '7.0123456789abcdef ']) {
    t.equal(parseIncarnation(bad), null, `${JSON.stringify(bad)} is refused`);
  }
  const a = { starts: 3, tag: 'ffffffffffffffff' };
  const b = { starts: 4, tag: '0000000000000000' };
  t.ok(compareIncarnations(b, a) > 0 && compareIncarnations(a, b) < 0, 'a later start goes after, whatever the tags');
  const c = { starts: 4, tag: '0000000000000001' };
  t.ok(compareIncarnations(c, b) > 0 && compareIncarnations(b, c) < 0, 'of one start, the later tag');
  t.equal(compareIncarnations(b, { ...b }), 0);
});

t.test('a later start of a member ends the earlier one\'s streams; the earlier is told, and refused from then on', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  // n2 forwards an operation to n1, which holds it unanswered: its stream is ended too when the later start calls.
  const n1 = await peer(t, 'n1', ports.n1, ports, undefined, { propose: () => new Promise(() => undefined) });
  const first = await peer(t, 'n2', ports.n2, ports, 3);
  t.equal(await deliver(first, n1, 1), 'stepped', 'start 3 is heard');
  const forwarding = first.mesh.forward('n1', Buffer.from('op'), 10_000).then(() => 'answered', (err: Error) => err.message);

  // Start 4 of n2: a copy of its data directory started elsewhere (here another port).
  const later = await peer(t, 'n2', await freePort(), ports, 4);
  t.equal(await deliver(later, n1, 2), 'stepped', 'start 4 is heard');
  await until('start 3 told', () => first.superseded.length > 0);
  t.equal(first.superseded[0]!.peer, 'n1', 'told by n1');
  t.match(first.superseded[0]!.details, /^start 4 of n2 has called n1 from 127\.0\.0\.1:\d+, and this process is start 3$/);
  t.match(await forwarding, /the stream to the primary n1 ended: start 4 of n2 has called n1/, 'its forwarding stream was ended too');
  t.ok(n1.lines.some((l) => l.event === 'member_restarted' && l.member === 'n2' && l.level === 'warn'), 'n1 says the earlier start\'s streams were ended');

  const stepped = n1.stepped.length;
  t.equal(await deliver(first, n1, 3), 'superseded', 'start 3 calls again: refused, and told again');
  t.notOk(n1.stepped.some((m) => m.term === 3), 'its message never reached Raft');
  t.equal(n1.stepped.length, stepped);
  const errors = n1.lines.filter((l) => l.event === 'earlier_start_refused');
  t.equal(errors.length, 1, 'one error line');
  t.equal(errors[0]!.level, 'error');
  t.match(errors[0]!.msg, /^a call from start 3 of member n2 \(from 127\.0\.0\.1:\d+\) was refused: start 4 of n2 \(from 127\.0\.0\.1:\d+\) has called since\. Two processes run as one member, or a data directory was put back from an older copy; the earlier one is told to stop$/);
  t.ok((await refusals(n1))! >= 1, 'counted as superseded');
  t.equal(await deliver(later, n1, 4), 'stepped', 'the later start goes on being heard');
  t.equal(later.superseded.length, 0);
});

t.test('a process of another cluster, under the same CA and member id, neither stops the member nor reaches Raft', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  let proposed = 0;
  const n1 = await peer(t, 'n1', ports.n1, ports, undefined, { propose: async () => ({ index: ++proposed, term: 1 }) });
  const running = await peer(t, 'n2', ports.n2, ports, 3);
  t.equal(await deliver(running, n1, 1), 'stepped', 'the member is heard');
  // A staging n2, restarted a hundred times, whose peer address for n1 points here.
  const staging = await peer(t, 'n2', await freePort(), ports, 100, {}, 'staging');
  const forwarded = await staging.mesh.forward('n1', Buffer.from('op'), 5_000).then(() => 'answered', (err: Error) => err.message);
  t.match(forwarded, /this is n1 of cluster apl-incarnation-test, and the call is of cluster staging: a peer address of another cluster points here/, 'its forwarded operation is refused, saying why');
  t.equal(proposed, 0, 'and never proposed');
  for (let i = 0; i < 20; i++) {
    staging.mesh.send([fromN2(100 + i)]);
    await new Promise((r) => setTimeout(r, 30));
  }
  t.notOk(n1.stepped.some((m) => m.term >= 100), 'its messages never reach Raft');
  t.equal(running.superseded.length, 0, 'the member is not told it was superseded');
  t.equal(staging.superseded.length, 0, 'nor is the other cluster\'s process');
  t.equal(await deliver(running, n1, 2), 'stepped', 'the member goes on being heard');
  t.notOk(n1.lines.some((l) => l.event === 'member_restarted' || l.event === 'earlier_start_refused'), 'no start of n2 was taken from the other cluster');
  t.match(n1.lines.find((l) => l.event === 'peer_refused' && l.reason === 'foreign_cluster'), { level: 'warn', from: 'n2', cluster: 'staging' }, 'the refusal is logged');
  t.equal(n1.lines.filter((l) => l.event === 'peer_refused' && l.reason === 'foreign_cluster').length, 1, 'once, though its process called again and again');
  const foreign = (await n1.metrics.registry.getSingleMetric('apl_peer_refused_total')!.get()).values.find((v) => v.labels.reason === 'foreign_cluster')?.value;
  t.ok(foreign! >= 1, 'and counted');
});

t.test('a start put back from an older copy is refused at its first call', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const n1 = await peer(t, 'n1', ports.n1, ports);
  const running = await peer(t, 'n2', ports.n2, ports, 9);
  t.equal(await deliver(running, n1, 1), 'stepped');
  const older = await peer(t, 'n2', await freePort(), ports, 8);
  t.equal(await deliver(older, n1, 2), 'superseded', 'refused at once');
  t.match(older.superseded[0]!.details, /^start 9 of n2 has called n1 from 127\.0\.0\.1:\d+, and this process is start 8$/);
  t.notOk(n1.stepped.some((m) => m.term === 2));
  t.equal(running.superseded.length, 0, 'the running one is untouched');
});

t.test('two processes of one start: the later tag goes on, whichever called first', async (t) => {
  for (const laterFirst of [false, true]) {
    const ports = { n1: await freePort(), n2: await freePort() };
    const n1 = await peer(t, 'n1', ports.n1, ports);
    const a = await peer(t, 'n2', ports.n2, ports, 5);
    const b = await peer(t, 'n2', await freePort(), ports, 5);
    const [earlierTag, laterTag] = a.mesh.tag < b.mesh.tag ? [a, b] : [b, a];
    const [one, other] = laterFirst ? [laterTag, earlierTag] : [earlierTag, laterTag];
    t.equal(await deliver(one, n1, 1), 'stepped', 'the first caller is heard');
    const second = await deliver(other, n1, 2);
    t.equal(second, laterFirst ? 'superseded' : 'stepped', laterFirst ? 'the earlier tag, calling second, is refused' : 'the later tag, calling second, is heard');
    await until('the earlier tag told', () => earlierTag.superseded.length > 0);
    t.equal(laterTag.superseded.length, 0, 'the later tag is never told');
    t.match(earlierTag.superseded[0]!.details, new RegExp(`and this process is start 5 \\(both start 5: the tag ${laterTag.mesh.tag} orders after this process's ${earlierTag.mesh.tag}\\)$`));
  }
});

t.test('a caller that names no start (an earlier release) is heard and disturbs nothing', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const n1 = await peer(t, 'n1', ports.n1, ports);
  const named = await peer(t, 'n2', ports.n2, ports, 2);
  t.equal(await deliver(named, n1, 1), 'stepped');
  const unnamed = await peer(t, 'n2', await freePort(), ports);
  t.equal(await deliver(unnamed, n1, 2), 'stepped', 'heard');
  t.equal(await deliver(named, n1, 3), 'stepped', 'the named one still heard');
  t.equal(named.superseded.length + unnamed.superseded.length, 0);
});

t.test('a malformed start is refused, INVALID_ARGUMENT, before any message is read', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const n1 = await peer(t, 'n1', ports.n1, ports);
  const tls = pem('n2');
  const credentials = grpc.credentials.createFromSecureContext(createSecureContext({ ...tls, minVersion: 'TLSv1.3' }), { checkServerIdentity: () => undefined });
  const client = new grpc.Client(`127.0.0.1:${ports.n1}`, credentials, { 'grpc.ssl_target_name_override': 'n1' });
  t.teardown(() => client.close());
  const metadata = new grpc.Metadata();
  metadata.set('apl-incarnation', 'three');
  const status = await new Promise<grpc.ServiceError | null>((resolve) => {
    const call = client.makeClientStreamRequest(PEER_SERVICE.raft.path, PEER_SERVICE.raft.requestSerialize, PEER_SERVICE.raft.responseDeserialize, metadata, (err) => resolve(err));
    call.write({ messages: [] });
    call.end();
  });
  t.equal(status?.code, grpc.status.INVALID_ARGUMENT);
  t.match(status?.details, 'the apl-incarnation metadata is not <starts>.<16 hex digits>');
  t.ok(n1.lines.some((l) => l.event === 'peer_refused' && l.reason === 'malformed'), 'logged as a refusal');
});
