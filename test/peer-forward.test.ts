// Proves the forwarding stream of the peer mesh, with two meshes in one process: a
// follower's operations reach the primary on one stream whose certificate is read
// once, not once per operation; each answer (or refusal) reaches the operation it
// belongs to, whatever the order; an operation the primary does not answer in time,
// or whose stream breaks, fails as unconfirmed; a member removed meanwhile and a
// certificate that names no member are refused; and a primary that does not serve
// the stream (an older release) is sent single Propose calls instead.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TLSSocket, createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { Writable } from 'node:stream';
import type { Message } from '@apl/raft';
import { CERT_SCRIPT, ForwardFailed, ForwardRefused, Metrics, PEER_SERVICE, PeerMesh, createLogger, type MeshHandlers } from '@apl/node';
import { freePort } from './support/cluster.js';
import { testCerts } from './support/node.js';

const certs = testCerts();
// Node.js warns once per process; the last test checks no mesh connection set an IP address as the TLS server name.
const warnings: string[] = [];
process.on('warning', (w: Error & { code?: string }) => warnings.push(`${w.code ?? w.name}: ${w.message}`));
execFileSync('bash', [CERT_SCRIPT, certs.dir, 'n9'], { stdio: 'ignore' });
const pem = (id: string) => ({ ca: readFileSync(certs.ca), cert: readFileSync(join(certs.dir, `${id}.pem`)), key: readFileSync(join(certs.dir, `${id}-key.pem`)) });

type Propose = MeshHandlers['propose'];

/** A mesh for member `id` of n1 and n2, serving `propose` (the rest is never called here). */
async function mesh(id: 'n1' | 'n2', ports: { n1: number; n2: number }, propose: Propose = () => Promise.reject(new Error('not the primary')), more: Partial<ConstructorParameters<typeof PeerMesh>[0]> = {}, step: MeshHandlers['step'] = () => undefined) {
  const m = new PeerMesh({
    self: id,
    members: [{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }, { id: 'n2', peer_addr: `127.0.0.1:${ports.n2}` }],
    clusterId: 'apl-forward-test', host: '127.0.0.1', port: ports[id], tls: pem(id),
    queueMessagesMax: 64, snapshotTimeoutMs: 5_000, log: createLogger('silent', id), metrics: new Metrics(),
    ...more,
  });
  const unused = () => {
    throw new Error('not used by this test');
  };
  await m.listen({ step, installSnapshot: unused, openSnapshot: unused, propose, proposeConfChange: unused, reportSnapshot: () => undefined, reportUnreachable: () => undefined, superseded: unused });
  return m;
}

/** The index a test primary puts an operation at: the number its bytes spell. */
const indexOf = (op: Uint8Array) => Number(Buffer.from(op).toString());
const op = (n: number) => Buffer.from(String(n));

/** Counts the certificates read from TLS sockets in this process while `fn` runs. */
async function certificateReads<T>(fn: () => Promise<T>): Promise<{ value: T; reads: number }> {
  const original = TLSSocket.prototype.getPeerCertificate;
  let reads = 0;
  TLSSocket.prototype.getPeerCertificate = function (this: TLSSocket, ...args: Parameters<typeof original>) {
    reads++;
    return original.apply(this, args);
  } as typeof original;
  try {
    return { value: await fn(), reads };
  } finally {
    TLSSocket.prototype.getPeerCertificate = original;
  }
}

t.test('operations travel on one stream, and each answer reaches its own operation', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const primary = await mesh('n1', ports, async (bytes) => {
    const n = indexOf(bytes);
    if (n % 7 === 0) throw Object.assign(new Error('refused'), { body: { error: 'not_primary', message: 'This replica is not the primary.', leader: 'n3' } });
    // Answer out of order: later operations first.
    await new Promise((r) => setTimeout(r, n % 5));
    return { index: n, term: 4 };
  });
  const follower = await mesh('n2', ports);
  t.teardown(async () => {
    await follower.close();
    await primary.close();
  });

  t.same(await follower.forward('n1', op(1), 5_000), { index: 1, term: 4 }, 'the first forward opens the stream and is answered');
  const { value: results, reads } = await certificateReads(() => Promise.allSettled(Array.from({ length: 200 }, (_, i) => follower.forward('n1', op(i + 2), 5_000))));
  t.equal(reads, 0, 'no certificate is read for the 200 operations on the open stream');
  let matched = 0;
  let refused = 0;
  results.forEach((r, i) => {
    const n = i + 2;
    if (n % 7 === 0) {
      if (r.status === 'rejected' && r.reason instanceof ForwardRefused && r.reason.body.error === 'not_primary' && r.reason.body.leader === 'n3') refused++;
    } else if (r.status === 'fulfilled' && r.value.index === n && r.value.term === 4) matched++;
  });
  t.equal(matched, 200 - Math.floor(201 / 7), 'every appended operation is told its own index');
  t.equal(refused, Math.floor(201 / 7), 'every refused one its refusal body, as ForwardRefused');
});

t.test('an operation not answered in time, or whose stream breaks, fails as unconfirmed', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  let primary = await mesh('n1', ports, () => new Promise(() => undefined));
  const follower = await mesh('n2', ports);
  t.teardown(async () => {
    await follower.close();
    await primary.close();
  });

  const started = Date.now();
  const late = await follower.forward('n1', op(1), 300).catch((e: unknown) => e);
  t.ok(late instanceof ForwardFailed, `unanswered: ForwardFailed (${(late as Error).message})`);
  t.ok(Date.now() - started >= 290, 'after its time');

  const cut = follower.forward('n1', op(2), 30_000).catch((e: unknown) => e);
  await new Promise((r) => setTimeout(r, 100));
  const closedAt = Date.now();
  await primary.close();
  const broken = await cut;
  t.ok(broken instanceof ForwardFailed, `the primary went away: ForwardFailed (${(broken as Error).message})`);
  t.ok(Date.now() - closedAt < 10_000, 'when the stream broke, not at its 30 s deadline');

  // The same member comes back: the next forwards open a new stream.
  primary = await mesh('n1', ports, async (bytes) => ({ index: indexOf(bytes), term: 5 }));
  let answer: unknown;
  for (let i = 0; i < 50 && !(answer && typeof answer === 'object' && 'index' in answer); i++) {
    answer = await follower.forward('n1', op(3), 2_000).catch((e: unknown) => e);
    if (answer instanceof ForwardFailed) await new Promise((r) => setTimeout(r, 100));
  }
  t.same(answer, { index: 3, term: 5 }, 'a forward after the primary is back is answered on a new stream');
});

t.test('a member removed while its stream is open is refused, and so is a certificate naming no member', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const primary = await mesh('n1', ports, async (bytes) => ({ index: indexOf(bytes), term: 1 }));
  const follower = await mesh('n2', ports);
  t.teardown(async () => {
    await follower.close();
    await primary.close();
  });
  t.same(await follower.forward('n1', op(1), 5_000), { index: 1, term: 1 }, 'a member is served');
  primary.setMembers([{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }]);
  const removed = await follower.forward('n1', op(2), 5_000).catch((e: unknown) => e);
  t.ok(removed instanceof ForwardFailed, `once removed, its operation is not appended: ${(removed as Error).message}`);
  t.match((removed as Error).message, /the certificate names n2, which is not a member of this cluster \(not added yet, or removed/, 'the stream was ended for it, saying that n2 is the one not in the cluster');

  const credentials = grpc.credentials.createFromSecureContext(createSecureContext({ ...pem('n9'), minVersion: 'TLSv1.3' }), { checkServerIdentity: () => undefined });
  const stranger = new grpc.Client(`127.0.0.1:${ports.n1}`, credentials, { 'grpc.ssl_target_name_override': 'n1' });
  t.teardown(() => stranger.close());
  const status = await new Promise<grpc.StatusObject>((resolve) => {
    const call = stranger.makeBidiStreamRequest(PEER_SERVICE.forward.path, PEER_SERVICE.forward.requestSerialize, PEER_SERVICE.forward.responseDeserialize);
    call.on('data', () => t.fail('a stranger is never answered'));
    call.on('error', () => undefined);
    call.on('status', resolve);
    call.write({ id: 1, operation: op(9) });
  });
  t.equal(status.code, grpc.status.PERMISSION_DENIED, `a certificate naming no member is refused: ${status.details}`);
  t.match(status.details, /^the certificate names n9, which is not a member of this cluster/, 'naming the member it names');
});

t.test('a removed member that was stopped is logged unreachable, then its link closed', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { lines.push(...chunk.toString().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>)); done(); } });
  const primary = await mesh('n1', ports, undefined, { log: createLogger('info', 'n1', sink), removedLinkMs: 1_500 });
  t.teardown(() => primary.close());
  let heard = 0;
  const follower = await mesh('n2', ports, undefined, {}, () => { heard++; });
  const heartbeat = (i: number): Message => ({ type: 'heartbeat', from: 'n1', to: 'n2', term: 1, logTerm: 0, index: 0, entries: [], commit: i, reject: false, rejectHint: 0 });
  for (let i = 0; i < 100 && heard === 0; i++) {
    primary.send([heartbeat(i)]);
    await new Promise((r) => setTimeout(r, 50));
  }
  t.ok(heard > 0, 'the link is up: the member hears the primary');
  await follower.close();
  primary.setMembers([{ id: 'n1', peer_addr: `127.0.0.1:${ports.n1}` }]);
  // The primary still sends to it a while (to tell it of its removal), and finds it gone.
  const event = (name: string) => lines.find((l) => l.event === name && l.peer === 'n2');
  for (let i = 0; i < 100 && !event('peer_unreachable'); i++) {
    primary.send([heartbeat(i)]);
    await new Promise((r) => setTimeout(r, 50));
  }
  t.match(event('peer_unreachable'), { level: 'warn', peer_addr: `127.0.0.1:${ports.n2}` }, 'a removed member stopped is found unreachable');
  for (let i = 0; i < 60 && !event('peer_link_closed'); i++) await new Promise((r) => setTimeout(r, 100));
  t.match(event('peer_link_closed'), { level: 'info', reason: 'removed', peer_addr: `127.0.0.1:${ports.n2}`, msg: /^member n2 at \S+ was removed from the cluster: its link is closed and it is no longer tried$/ }, 'and then, once its time is up, its link is closed, and the log says so');
  t.ok(lines.indexOf(event('peer_unreachable')!) < lines.indexOf(event('peer_link_closed')!), 'in that order');
});

t.test('a primary that does not serve Forward is sent Propose calls', async (t) => {
  const ports = { n1: await freePort(), n2: await freePort() };
  // An older primary: the Peer service without Forward.
  const older = new grpc.Server();
  const { forward: _absent, ...service } = PEER_SERVICE;
  let calls = 0;
  older.addService(service, {
    raft: (call: grpc.ServerReadableStream<unknown, object>, done: grpc.sendUnaryData<object>) => call.on('end', () => done(null, {})),
    snapshot: (_call: unknown, done: grpc.sendUnaryData<unknown>) => done({ code: grpc.status.UNIMPLEMENTED }),
    propose: (call: grpc.ServerUnaryCall<{ operation: Uint8Array }, object>, done: grpc.sendUnaryData<object>) => {
      calls++;
      done(null, { index: indexOf(call.request.operation), term: 2 });
    },
  });
  const { ca, cert, key } = pem('n1');
  await new Promise<void>((resolve, reject) => older.bindAsync(`127.0.0.1:${ports.n1}`, grpc.ServerCredentials.createSsl(ca, [{ cert_chain: cert, private_key: key }], true), (err) => (err ? reject(err) : resolve())));
  const follower = await mesh('n2', ports);
  t.teardown(async () => {
    await follower.close();
    older.forceShutdown();
  });
  const answers = await Promise.all([1, 2, 3].map((n) => follower.forward('n1', op(n), 5_000)));
  t.same(answers, [{ index: 1, term: 2 }, { index: 2, term: 2 }, { index: 3, term: 2 }], 'the operations waiting on the refused stream are sent again as Propose calls');
  t.same(await follower.forward('n1', op(4), 5_000), { index: 4, term: 2 }, 'and so are later ones');
  t.equal(calls, 4, 'each exactly once');
});

t.test('members are reached by the TLS server name their certificate holds, never an IP address', async (t) => {
  t.same(warnings.filter((w) => w.startsWith('DEP0123')), [], 'no DEP0123 warning after every connection above');
});
