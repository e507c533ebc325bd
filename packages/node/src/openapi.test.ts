// Proves the published contract is the one the code generates: the OpenAPI documents
// rendered from the planes' zod schemas equal the committed artifacts byte for byte.
// A change to the wire fails here until the artifacts are regenerated on purpose.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderDocuments } from './openapi.js';

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
