// Proves the logs of DESIGN §10: JSON lines, one per request with the plane, route,
// status and (for an intent) the transaction id, and one per state change of the
// node; and that no attestation, admin token or justification text is ever logged;
// and that the events docs/operations.md names are ones the node logs.
import t, { type Test } from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '@apl/node';
import { AGENT_A, bootstrap, envelope, startTestNode, testCerts, TOKENS, type TestNode } from './support/node.js';
import { REPO } from './support/process.js';

/** A bootstrapped node whose log lines are kept in `lines`; closed at the test's end. */
async function loggedNode(t: Test): Promise<{ n: TestNode; lines: string[] }> {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { lines.push(...chunk.toString().split('\n').filter(Boolean)); done(); } });
  const n = await startTestNode({}, undefined, createLogger('info', 'n1', sink));
  t.teardown(() => n.close());
  await bootstrap(n);
  return { n, lines };
}

t.test('every request and state change is one JSON line, with no secret in any', async (t) => {
  const { n, lines } = await loggedNode(t);
  const att = await n.issuer.sign(AGENT_A);
  const justification = 'A reason only the agent platform keeps';
  await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_logged', justification }) });
  await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_refused', policy: 'pol_old', justification }) });
  await n.api('GET', '/api/v1/usages/usage_acme_llm', { token: att });
  await n.admin.request('GET', '/admin/v1/log/digest'); // no token: refused before routing
  await n.admin.request('GET', '/admin/v1/nowhere', { token: TOKENS.operator });
  await n.close();

  const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  t.ok(records.length > 10, `${records.length} lines, each a JSON object`);
  t.match(records.find((r) => r.event === 'node_started'), { level: 'info', node: 'n1', agent: /^https:\/\/127\.0\.0\.1:\d+$/ });
  t.ok(records.some((r) => r.event === 'replica_open'));
  t.match(records.find((r) => r.event === 'role_changed' && r.role === 'leader'), { level: 'info', leader: 'n1', msg: /^n1 is the primary in term \d+; the primary is n1$/ }, 'a change of role is logged');
  t.ok(records.some((r) => r.event === 'node_stopped'));
  t.match(records.find((r) => r.event === 'request' && r.transaction === 'txn_logged'),
    { plane: 'agent', method: 'POST', route: '/api/v1/intents', status: 200, ms: Number });
  t.match(records.find((r) => r.event === 'request' && r.transaction === 'txn_refused'), { status: 409, error: 'stale_policy' });
  t.match(records.find((r) => r.event === 'request' && r.route === '/api/v1/usages/:id'), { status: 200 });
  t.ok(records.some((r) => r.event === 'request' && r.plane === 'admin' && r.status === 201), 'admin requests too');
  t.match(records.find((r) => r.event === 'request' && r.status === 401 && r.plane === 'admin'), { route: '/admin/v1/log/digest', error: 'unauthorized' }, 'a request refused before routing names the route it was for');
  t.match(records.find((r) => r.event === 'request' && r.status === 404 && r.plane === 'admin'), { route: 'unmatched' }, 'one for no route is unmatched');
  const text = lines.join('\n');
  for (const secret of [att, justification, ...Object.values(TOKENS)]) t.notOk(text.includes(secret), 'no secret is logged');
});

t.test('a feed its consumer leaves is logged and counted when its connection closes, and timed by status', async (t) => {
  const { n, lines } = await loggedNode(t);
  // The consumer reads the feed's first line, then goes: the answer never finishes.
  await new Promise<void>((resolve, reject) => {
    const req = request(`${n.node.adminUrl}/admin/v1/feed?from=0`, { ca: readFileSync(testCerts().ca), headers: { authorization: `Bearer ${TOKENS.operator}` } }, (res) => {
      res.once('data', () => {
        req.destroy();
        resolve();
      });
    });
    req.on('error', (err) => (req.destroyed ? undefined : reject(err)));
    req.end();
  });
  const feedLine = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((r) => r.event === 'request' && r.route === '/admin/v1/feed');
  for (let k = 0; k < 100 && feedLine() === undefined; k++) await new Promise((r) => setTimeout(r, 50));
  t.match(feedLine(), { plane: 'admin', method: 'GET', status: 200, closed_early: true, ms: Number }, 'the feed is logged once its consumer has gone');
  const text = (await n.admin.request('GET', '/metrics')).text;
  const series = (name: string, ...labels: string[]) => text.split('\n').filter((l) => l.startsWith(`${name}{`) && labels.every((x) => l.includes(x)));
  t.match(series('apl_http_requests_total', 'route="/admin/v1/feed"', 'status="200"'), [/ 1$/], 'and counted');
  t.match(series('apl_http_request_duration_seconds_count', 'route="/admin/v1/feed"', 'status="200"'), [/ 1$/], 'and timed, under its status');
  t.ok(series('apl_http_request_duration_seconds_count', 'plane="admin"', 'status="201"').length > 0, 'the bootstrap\'s writes are timed under 201');
});

t.test('every log event operations.md names is one the node logs', async (t) => {
  const doc = readFileSync(join(REPO, 'docs/operations.md'), 'utf8');
  const bullet = doc.slice(doc.indexOf('- Logs are JSON lines on stdout'), doc.indexOf('Attestations, tokens and justification texts are never logged'));
  const settings = new Set(['peer_addr']); // named there as what a peer_unreachable line may point at
  const named = [...bullet.matchAll(/`([a-z]+(?:_[a-z]+)+)`/g)].map((m) => m[1]!).filter((w) => !settings.has(w));
  t.ok(named.length >= 10, `${named.length} events named`);
  const source = readdirSync(join(REPO, 'packages/node/src'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
    .map((f) => readFileSync(join(REPO, 'packages/node/src', f), 'utf8')).join('\n');
  for (const event of named) t.ok(source.includes(`event: '${event}'`), `${event} is logged by the node`);
});
