// Proves that the SDK's generated types are the committed OpenAPI documents': the
// generator, run in --check mode, finds nothing stale; and it does find a change
// when a document differs (here a copy with one more error code), naming the files
// to regenerate and the command that does it.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ERROR_CODES } from '@apl/client';
import { OPENAPI_FILES } from '@apl/node';
import { REPO } from './support/process.js';

const GENERATE = join(REPO, 'packages/client/scripts/generate.mjs');

t.test('the committed generated types match the OpenAPI documents', async (t) => {
  const out = execFileSync(process.execPath, [GENERATE, '--check'], { encoding: 'utf8' });
  t.match(out, /match the OpenAPI documents/);
});

t.test('a changed document makes the check fail until the types are regenerated', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-openapi-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(OPENAPI_FILES.agent, join(dir, 'agent-plane.json'));
  const admin = JSON.parse(readFileSync(OPENAPI_FILES.admin, 'utf8')) as { components: { schemas: { Error: { properties: { error: { enum: string[] } } } } } };
  admin.components.schemas.Error.properties.error.enum.push('cursor_expired');
  writeFileSync(join(dir, 'admin-plane.json'), JSON.stringify(admin));
  const r = spawnSync(process.execPath, [GENERATE, '--check', '--docs', dir], { encoding: 'utf8' });
  t.equal(r.status, 1);
  t.match(r.stderr, /stale generated types \(run npm run openapi/);
  t.match(r.stderr, /contract\.ts/);
  t.match(r.stderr, /admin-plane\.ts/);
  t.notMatch(r.stderr, /agent-plane\.ts/, 'the unchanged document\'s types are not named');
});

t.test('the error codes are the documents\' own', async (t) => {
  const doc = JSON.parse(readFileSync(OPENAPI_FILES.agent, 'utf8')) as { components: { schemas: { Error: { properties: { error: { enum: string[] } } } } } };
  t.same([...ERROR_CODES], doc.components.schemas.Error.properties.error.enum);
});
