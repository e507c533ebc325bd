// Proves the agent plane's thread on its own, with a backend that records its calls:
// a request's call reaches the node's thread with what the front end read (the
// envelope, or what its schema found wrong), the answer comes back as written, the
// thread's log lines reach the node's writer whole, and its request counts reach the
// node's metrics; a closed thread is not a failure, and one that dies is reported once
// and counts nothing more, without a metrics reading ever hanging; a thread started
// early (before the node had read its settings) is the one a start takes, and one
// discarded leaves a start to make its own.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import t from 'tap';
import { AgentThread, type AgentThreadData } from './agent-thread.js';
import { ConfigSchema } from './config.js';
import { CERT_SCRIPT } from './devsetup.js';
import type { AgentBackend, Answer, IntentCall, ReadCall } from './gateway.js';
import { OPENAPI_FILES } from './node.js';

const certs = mkdtempSync(join(tmpdir(), 'apl-agent-thread-'));
execFileSync('bash', [CERT_SCRIPT, certs, 'n1'], { stdio: 'ignore' });
t.teardown(() => rmSync(certs, { recursive: true, force: true }));

const data = (): AgentThreadData => {
  const c = ConfigSchema.parse({});
  return {
    host: '127.0.0.1', port: 0, advertised: null, cert: readFileSync(join(certs, 'n1.pem')), key: readFileSync(join(certs, 'n1-key.pem')), http: c.http,
    bodyBytesMax: c.limits.body_bytes_max, entriesPerIntentMax: c.limits.entries_per_intent_max,
    openapiFile: OPENAPI_FILES.agent, logLevel: 'info', nodeId: 'n1',
  };
};

class Recorder implements AgentBackend {
  readonly intents: IntentCall[] = [];
  readonly reads: ReadCall[] = [];
  async intent(c: IntentCall): Promise<Answer> {
    this.intents.push(c);
    return { status: 200, text: '{"verdict":"Permitted"}', headers: { 'Idempotent-Replayed': 'true' } };
  }
  async read(c: ReadCall): Promise<Answer> {
    this.reads.push(c);
    return { status: 404, text: '{"error":"unknown_transaction","message":"none"}', error: 'unknown_transaction', headers: { Consistency: 'linearizable' } };
  }
  async health(): Promise<Answer> {
    return { status: 200, text: '{"status":"ok"}' };
  }
}

function send(url: string, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method, ca: readFileSync(join(certs, 'ca.pem')), headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

t.test('calls cross to the backend and answers come back as written', async (t) => {
  const backend = new Recorder();
  const lines: string[] = [];
  const failures: Error[] = [];
  const thread = await AgentThread.start(data(), backend, (l) => lines.push(l), (err) => failures.push(err));
  t.teardown(() => thread.close());

  const ok = await send(thread.url, 'POST', '/api/v1/intents', JSON.stringify({ agent: 'agent://a.example/agent/x', nope: 1 }));
  t.equal(ok.status, 200);
  t.equal(ok.text, '{"verdict":"Permitted"}', 'the body as the backend wrote it');
  t.equal(ok.headers['idempotent-replayed'], 'true', 'with its headers');
  t.equal(backend.intents[0]!.claimed, 'agent://a.example/agent/x', 'the claimed agent crossed');
  t.ok('issues' in backend.intents[0]! && backend.intents[0].issues.length > 0, 'with what the schema found wrong');

  const missing = await send(thread.url, 'GET', '/api/v1/transactions/txn_1?consistency=local', undefined, { authorization: 'Bearer tok' });
  t.equal(missing.status, 404);
  t.equal(missing.headers.consistency, 'linearizable');
  t.same(backend.reads[0], { route: 'transaction', id: 'txn_1', query: { consistency: 'local' }, token: 'tok' }, 'the checked call crossed');
  t.equal((await send(thread.url, 'GET', '/api/v1/transactions/txn_1')).status, 401, 'no attestation: answered on the thread, no call');
  t.equal(backend.reads.length, 1);

  const json = await thread.metricsJson();
  const requests = json.find((m) => m.name === 'apl_http_requests_total');
  t.ok(requests?.values.some((v) => v.labels.route === '/api/v1/intents' && v.labels.status === '200' && v.value === 1), 'the thread counted the intent');
  await new Promise((r) => setTimeout(r, 50));
  const logged = lines.join('').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
  t.match(logged.find((l) => l.route === '/api/v1/transactions/:txn_id'), { event: 'request', node: 'n1', status: 404, error: 'unknown_transaction' }, 'whole lines, with the error code the answer named');
  await thread.close();
  t.same(failures, [], 'a close is not a failure');
});

t.test('a thread that dies is reported once and counts nothing more', async (t) => {
  const failures: Error[] = [];
  const thread = await AgentThread.start(data(), new Recorder(), () => undefined, (err) => failures.push(err));
  await (thread as unknown as { worker: Worker }).worker.terminate();
  await new Promise((r) => setTimeout(r, 50));
  t.equal(failures.length, 1, `reported: ${failures[0]?.message}`);
  t.same(await thread.metricsJson(), [], 'a metrics reading answers at once, with nothing');
  await thread.close();
  t.equal(failures.length, 1, 'and a close after it reports nothing more');
});

t.test('an address in use is the listener\'s own error', async (t) => {
  const first = await AgentThread.start(data(), new Recorder(), () => undefined, () => undefined);
  t.teardown(() => first.close());
  const port = Number(new URL(first.url).port);
  const err = await AgentThread.start({ ...data(), port }, new Recorder(), () => undefined, () => undefined).catch((e: NodeJS.ErrnoException) => e);
  t.equal((err as NodeJS.ErrnoException).code, 'EADDRINUSE');
});

t.test('a thread started early serves once a start hands it its settings; one discarded is not used', async (t) => {
  AgentThread.startEarly();
  const backend = new Recorder();
  const thread = await AgentThread.start(data(), backend, () => undefined, () => undefined);
  t.teardown(() => thread.close());
  t.equal((await send(thread.url, 'POST', '/api/v1/intents', '{}')).status, 200);
  t.equal(backend.intents.length, 1, 'the call crossed from the early thread');

  AgentThread.startEarly();
  AgentThread.discardEarly();
  const fresh = await AgentThread.start(data(), new Recorder(), () => undefined, () => undefined);
  t.teardown(() => fresh.close());
  t.equal((await send(fresh.url, 'GET', '/healthz')).status, 200, 'a start after a discard makes its own thread');
});
