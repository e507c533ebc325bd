// Proves that the agent plane answers the same whether its front end runs on a thread
// of its own (the default) or on the node's thread (agent_plane_thread: false): two
// nodes with the same history are sent the same requests, and every answer (status,
// body, the headers a client reads) is the same to the byte, and the node's metrics
// count the requests its thread answered. An agent port in use fails the start in
// both modes with the listener's own error, and a node then starts on the same data
// directory.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_A, bootstrap, envelope, startTestNode, type Response, type TestNode } from './support/node.js';

t.setTimeout(120_000);

/** The headers a client of the agent plane reads. */
const HEADERS = ['content-type', 'content-length', 'idempotent-replayed', 'consistency', 'retry-after'];

t.test('the front end on its own thread answers every route as on the node\'s thread', async (t) => {
  const threaded = await startTestNode();
  t.teardown(() => threaded.close());
  const here = await startTestNode({ agent_plane_thread: false });
  t.teardown(() => here.close());
  // One issuer for both, so that the same attestation, and so the same history, holds on each.
  await bootstrap(threaded);
  await bootstrap({ adm: here.adm, issuer: threaded.issuer });
  const att = await threaded.issuer.sign(AGENT_A);

  const same = async (what: string, send: (n: TestNode) => Promise<Response>, url = false) => {
    const a = await send(threaded);
    const b = await send(here);
    t.equal(a.status, b.status, `${what}: status ${a.status}`);
    // The OpenAPI document names the address of the plane that serves it.
    const text = (r: Response, n: TestNode) => (url ? r.text.replaceAll(n.node.agentUrl, '<agent>') : r.text);
    t.equal(text(a, threaded), text(b, here), `${what}: body`);
    for (const h of HEADERS) if (!(url && h === 'content-length')) t.equal(a.headers[h], b.headers[h], `${what}: ${h}`);
    return a;
  };

  const first = envelope(att, { transaction: 'txn_both_1' });
  t.equal((await same('an intent permitted', (n) => n.api('POST', '/api/v1/intents', { body: first }))).body.verdict, 'Permitted');
  t.equal((await same('its replay', (n) => n.api('POST', '/api/v1/intents', { body: first }))).headers['idempotent-replayed'], 'true');
  await same('a forbidden amount', (n) => n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_both_2', minor: 900_000_000 }) }));
  await same('a stale pin', (n) => n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_both_3', policy: 'pol_old' }) }));
  await same('an envelope its schema refuses', (n) => n.api('POST', '/api/v1/intents', { body: { ...envelope(att, { transaction: 'txn_both_4' }), entries: 'none' } }));
  await same('no body', (n) => n.api('POST', '/api/v1/intents', { raw: '' }));
  await same('not JSON', (n) => n.api('POST', '/api/v1/intents', { raw: '{"agent":', headers: { 'content-type': 'application/json' } }));
  await same('another content type', (n) => n.api('POST', '/api/v1/intents', { raw: 'agent=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }));
  await same('an agent that is no URI', (n) => n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_both_5', agent: 'mallory' }) }));
  await same('an attestation not valid', (n) => n.api('POST', '/api/v1/intents', { body: envelope('v4.public.nope', { transaction: 'txn_both_6' }) }));
  t.equal((await same('a transaction read', (n) => n.api('GET', '/api/v1/transactions/txn_both_1', { token: att }))).headers.consistency, 'linearizable');
  await same('a local read', (n) => n.api('GET', '/api/v1/transactions/txn_both_1?consistency=local', { token: att }));
  await same('a read query its schema refuses', (n) => n.api('GET', '/api/v1/transactions/txn_both_1?consistency=eventual', { token: att }));
  t.equal((await same('a transaction never made', (n) => n.api('GET', '/api/v1/transactions/txn_none', { token: att }))).status, 404);
  await same('a read without an attestation', (n) => n.api('GET', '/api/v1/accounts/acc_acme_cash/balance'));
  await same('a balance', (n) => n.api('GET', '/api/v1/accounts/acc_acme_cash/balance', { token: att }));
  await same('obligations', (n) => n.api('GET', '/api/v1/obligations?state=all&limit=5', { token: att }));
  await same('the policy in force', (n) => n.api('GET', '/api/v1/policies/active', { token: att }));
  await same('a usage balance', (n) => n.api('GET', '/api/v1/usages/usage_acme_llm', { token: att }));
  t.match((await same('a usage balance as text', (n) => n.api('GET', '/api/v1/usages/usage_acme_llm?format=text', { token: att }))).headers['content-type'], /^text\/plain/);
  await same('a usage id that is none', (n) => n.api('GET', '/api/v1/usages/nope', { token: att }));
  t.equal((await same('HEAD of a balance', (n) => n.agent.request('HEAD', '/api/v1/accounts/acc_acme_cash/balance', { token: att }))).text, '');
  await same('health', (n) => n.api('GET', '/healthz'));
  await same('readiness', (n) => n.api('GET', '/readyz'));
  await same('a route there is not', (n) => n.api('GET', '/api/v1/nothing'));
  await same('the OpenAPI document', (n) => n.api('GET', '/api/openapi.json'), true);

  const counted = async (n: TestNode) => {
    const r = await n.adm('operator', 'GET', '/metrics');
    return /^apl_http_requests_total\{plane="agent",route="\/api\/v1\/intents",status="200"\} (\d+)$/m.exec(r.text)?.[1];
  };
  t.equal(await counted(threaded), await counted(here), 'the node\'s metrics count the requests its agent-plane thread answered');
});

t.test('an agent port in use fails the start in either mode with the listener\'s error', async (t) => {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => taken.close(() => r())));
  const port = (taken.address() as { port: number }).port;
  for (const thread of [true, false]) {
    const dir = mkdtempSync(join(tmpdir(), 'apl-node-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const err = await startTestNode({ agent_port: port, agent_plane_thread: thread }, dir).then(
      (n) => {
        void n.close();
        return null;
      },
      (e: NodeJS.ErrnoException) => e,
    );
    t.equal(err?.code, 'EADDRINUSE', `agent_plane_thread ${thread}: ${err?.message}`);
    const again = await startTestNode({ agent_plane_thread: thread }, dir);
    t.equal((await again.api('GET', '/healthz')).status, 200, 'a node starts on the same data directory');
    await again.close();
  }
});
