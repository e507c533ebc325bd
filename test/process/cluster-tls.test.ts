// Proves the peer mesh's trust: a member's certificate reaches the Peer service, and
// a peer that offers TLS 1.2 only, one with no client certificate, one whose
// certificate comes from another CA, and one whose certificate names a node that is
// not a member are each refused. A Raft message naming another cluster, or sent
// under another member's certificate, is refused and counted, and the node goes on.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { messageCodec, type Message } from '@apl/raft';
import { CERT_SCRIPT, PEER_SERVICE } from '@apl/node';
import { testCerts, TOKENS } from '../support/node.js';
import { startCluster } from '../support/cluster.js';

const certs = testCerts();
const other = mkdtempSync(join(tmpdir(), 'apl-other-ca-'));
t.teardown(() => rmSync(other, { recursive: true, force: true }));
execFileSync('bash', [CERT_SCRIPT, other, 'n2'], { stdio: 'ignore' });
execFileSync('bash', [CERT_SCRIPT, certs.dir, 'n9'], { stdio: 'ignore' });
const pem = (dir: string, id: string) => ({ cert: readFileSync(join(dir, `${id}.pem`)), key: readFileSync(join(dir, `${id}-key.pem`)) });

/** Calls Propose on `addr` as the holder of `identity`; answers the gRPC status code and details. */
function propose(addr: string, context: SecureContextOptions): Promise<{ code: number; details: string; metadata: string | null }> {
  const credentials = grpc.credentials.createFromSecureContext(createSecureContext({ ca: readFileSync(certs.ca), ...context }), { checkServerIdentity: () => undefined });
  const client = new grpc.Client(addr, credentials);
  return new Promise((resolve) => {
    client.makeUnaryRequest(PEER_SERVICE.propose.path, PEER_SERVICE.propose.requestSerialize, PEER_SERVICE.propose.responseDeserialize, { operation: Buffer.from('{}') }, new grpc.Metadata(), { deadline: Date.now() + 5_000 }, (err) => {
      client.close();
      const md = err?.metadata?.get('apl-error')[0];
      resolve({ code: err?.code ?? grpc.status.OK, details: err?.details ?? '', metadata: typeof md === 'string' ? md : null });
    });
  });
}

/** Streams Raft messages to `addr` under `identity`'s certificate. */
function sendRaft(addr: string, identity: string, encoded: Uint8Array[]): Promise<void> {
  const credentials = grpc.credentials.createFromSecureContext(createSecureContext({ ca: readFileSync(certs.ca), ...pem(certs.dir, identity), minVersion: 'TLSv1.3' }), { checkServerIdentity: () => undefined });
  const client = new grpc.Client(addr, credentials);
  return new Promise((resolve) => {
    const call = client.makeClientStreamRequest(PEER_SERVICE.raft.path, PEER_SERVICE.raft.requestSerialize, PEER_SERVICE.raft.responseDeserialize, () => {
      client.close();
      resolve();
    });
    call.write({ messages: encoded });
    call.end();
  });
}

async function refusedCount(adminUrl: string, reason: string): Promise<number> {
  const { Client } = await import('../support/node.js');
  const c = new Client(adminUrl, certs.ca);
  const r = await c.request('GET', '/metrics', { token: TOKENS.operator });
  c.close();
  const m = new RegExp(`apl_peer_refused_total\\{reason="${reason}"\\} (\\d+)`).exec(r.text);
  return m ? Number(m[1]) : 0;
}

t.test('the peer listener admits members over mutual TLS 1.3 and refuses everyone else', async (t) => {
  const c = await startCluster({ ids: ['n1', 'n2', 'n3'] });
  t.teardown(() => c.close());
  await c.leader();
  const n1 = c.members.find((m) => m.id === 'n1')!;

  const member = await propose(n1.peer_addr, { ...pem(certs.dir, 'n2'), minVersion: 'TLSv1.3' });
  t.equal(member.code, grpc.status.FAILED_PRECONDITION, `a member reaches the service: ${member.details}`);
  t.match(member.metadata ?? '', /"error":"(malformed_request|not_primary)"/, 'and is answered by it');

  const tls12 = await propose(n1.peer_addr, { ...pem(certs.dir, 'n2'), maxVersion: 'TLSv1.2' });
  t.equal(tls12.code, grpc.status.UNAVAILABLE, `TLS 1.2 only is refused: ${tls12.details}`);
  const anonymous = await propose(n1.peer_addr, { minVersion: 'TLSv1.3' });
  t.equal(anonymous.code, grpc.status.UNAVAILABLE, `no client certificate is refused: ${anonymous.details}`);
  const foreignCa = await propose(n1.peer_addr, { ...pem(other, 'n2'), minVersion: 'TLSv1.3' });
  t.equal(foreignCa.code, grpc.status.UNAVAILABLE, `a certificate of another CA is refused: ${foreignCa.details}`);
  const stranger = await propose(n1.peer_addr, { ...pem(certs.dir, 'n9'), minVersion: 'TLSv1.3' });
  t.equal(stranger.code, grpc.status.PERMISSION_DENIED, `a certificate naming no member is refused: ${stranger.details}`);
  t.ok((await refusedCount(n1.admin_url, 'unknown_member')) >= 1, 'and counted');
});

t.test('raft messages of another cluster, or not from their certificate, are refused and counted', async (t) => {
  const c = await startCluster({ ids: ['n1', 'n2', 'n3'] });
  t.teardown(() => c.close());
  await c.leader();
  const n1 = c.members.find((m) => m.id === 'n1')!;
  const beat: Message = { type: 'heartbeat', from: 'n2', to: 'n1', term: 999, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0 };
  await sendRaft(n1.peer_addr, 'n2', [messageCodec('another-cluster').encode(beat)]);
  await sendRaft(n1.peer_addr, 'n3', [messageCodec('apl-test-cluster').encode(beat)]);
  await sendRaft(n1.peer_addr, 'n2', [new Uint8Array([0xff, 0xff, 0xff])]);
  t.equal(await refusedCount(n1.admin_url, 'foreign_cluster'), 1, 'the foreign message is counted');
  t.equal(await refusedCount(n1.admin_url, 'sender_mismatch'), 1, 'so is the message under another member\'s certificate');
  t.equal(await refusedCount(n1.admin_url, 'malformed'), 1, 'and the unreadable one');
  t.ok(c.process('n1')!.alive(), 'the node goes on');
  const cluster = await c.handle('n1').adm('operator', 'GET', '/admin/v1/cluster');
  t.ok(cluster.body.term < 999, 'no refused message reached Raft (its term would have been taken)');
});
