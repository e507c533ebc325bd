// Proves the published contract is the one the code generates: the OpenAPI documents
// rendered from the planes' zod schemas equal the committed artifacts byte for byte.
// A change to the wire fails here until the artifacts are regenerated on purpose.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseJson, stringifyJson } from '@apl/core';
import { renderDocuments, withServer } from './openapi.js';

const committed = (name: string) => fileURLToPath(new URL(`../openapi/${name}`, import.meta.url));

/** Where two texts first differ, as a line number and both lines, for the failure message. */
function firstDifference(a: string, b: string): string {
  const x = a.split('\n');
  const y = b.split('\n');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] !== y[i]) return `line ${i + 1}: committed ${JSON.stringify(x[i] ?? '(end of file)')}, generated ${JSON.stringify(y[i] ?? '(end of file)')}`;
  }
  return 'no line differs';
}

const docs = renderDocuments();
for (const [plane, file] of [['agent', 'agent-plane.json'], ['admin', 'admin-plane.json']] as const) {
  t.test(`the generated ${plane}-plane document equals the committed openapi/${file}`, async (t) => {
    const path = committed(file);
    const onDisk = readFileSync(path, 'utf8');
    const generated = docs[plane];
    const same = onDisk === generated;
    t.ok(same, same ? `openapi/${file} is current` : [
      `packages/node/openapi/${file} differs from what the code generates (${firstDifference(onDisk, generated)}).`,
      'If the change to the wire is deliberate, run `npm run openapi` and commit the regenerated document with it;',
      'otherwise the change breaks the published contract.',
    ].join(' '));
  });
}

t.test('the documents are OpenAPI 3.1 and newline-terminated', async (t) => {
  for (const text of Object.values(docs)) {
    t.equal(JSON.parse(text).openapi, '3.1.0');
    t.ok(text.endsWith('}\n'));
  }
});

t.test('the committed documents name the development addresses, the project\'s license and the security of every route', async (t) => {
  const { license } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { license: string };
  const agent = JSON.parse(docs.agent);
  const admin = JSON.parse(docs.admin);
  t.strictSame(agent.servers.map((s: { url: string }) => s.url), ['https://127.0.0.1:8443']);
  t.strictSame(admin.servers.map((s: { url: string }) => s.url), ['https://127.0.0.1:9443']);
  for (const doc of [agent, admin]) t.strictSame(doc.info.license, { name: license, identifier: license }, 'the license of package.json');
  /** Each operation's security requirement: its own, or the document's. */
  const security = (doc: { security: unknown; paths: Record<string, Record<string, { security?: unknown }>> }) => Object.fromEntries(
    Object.entries(doc.paths).flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => [`${method.toUpperCase()} ${path}`, op.security ?? doc.security])),
  );
  const attestation = [{ attestation: [] }];
  t.strictSame(security(agent), {
    'POST /api/v1/intents': [],
    'GET /api/v1/transactions/{txn_id}': attestation,
    'GET /api/v1/accounts/{id}/balance': attestation,
    'GET /api/v1/obligations': attestation,
    'GET /api/v1/policies/active': attestation,
    'GET /api/v1/usages/{id}': attestation,
    'GET /api/openapi.json': [],
    'GET /healthz': [],
    'GET /readyz': [],
  }, 'the reads take the attestation as a bearer token; the intent carries it in its body; the rest is public');
  const adminSecurity = security(admin);
  const pub = Object.keys(adminSecurity).filter((k) => (adminSecurity[k] as unknown[]).length === 0);
  t.strictSame(pub, ['GET /admin/openapi.json', 'GET /metrics'], 'the admin plane\'s public routes');
  t.ok(Object.entries(adminSecurity).every(([k, s]) => pub.includes(k) || JSON.stringify(s) === '[{"admin":[]}]'), 'every other admin route takes the admin token');
});

t.test('withServer names the node\'s own address in servers and changes nothing else', async (t) => {
  for (const text of Object.values(docs)) {
    const served = withServer(text, 'https://10.0.0.12:18443');
    const doc = parseJson(served) as Record<string, unknown>;
    t.strictSame(doc.servers, [{ url: 'https://10.0.0.12:18443', description: 'The node that served this document.' }]);
    const original = parseJson(text) as Record<string, unknown>;
    t.not(JSON.stringify(original.servers), JSON.stringify(doc.servers));
    t.equal(`${stringifyJson({ ...doc, servers: original.servers }, 2)}\n`, text, 'the rest of the document is the committed text, byte for byte');
  }
});

t.test('128-bit bounds are written exactly, not as doubles that round 2^127 - 1 up to 2^127', async (t) => {
  const doc = parseJson(docs.agent) as { components: { schemas: Record<string, unknown> } };
  const bounds: [unknown, unknown][] = [];
  const walk = (node: unknown): void => {
    if (node === null || typeof node !== 'object') return;
    const s = node as Record<string, unknown>;
    if (s.format === 'int128' && s.maximum !== undefined) bounds.push([s.minimum, s.maximum]);
    for (const v of Object.values(s)) walk(v);
  };
  walk(doc.components.schemas);
  t.ok(bounds.length > 0, 'the envelope has bounded 128-bit integers');
  const max = (1n << 127n) - 1n;
  t.ok(bounds.every(([, hi]) => hi === max), `every maximum is 2^127 - 1 exactly: ${bounds.map(([, hi]) => String(hi)).join(', ')}`);
  t.ok(bounds.every(([lo]) => lo === 1 || lo === 0 || lo === -(1n << 127n)), 'and every minimum is exact');
  t.notOk(docs.agent.includes('x-exact-range'), 'the carrier of the exact bounds is not published');
});
