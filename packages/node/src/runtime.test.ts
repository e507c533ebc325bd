// Proves that the server refuses a Node.js it does not support, with a message that
// names the supported versions and how to get one, and accepts the supported ones.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { hasJsonSourceText, runtimeRefusal } from './runtime.js';

t.test('22 and later with source text in JSON.parse are accepted; older ones are refused with what to run', async (t) => {
  t.equal(runtimeRefusal('v24.21.0', true), null);
  t.equal(runtimeRefusal('v22.12.0', true), null);
  t.equal(runtimeRefusal('v26.1.0', true), null);
  for (const old of ['v20.20.2', 'v18.19.0', 'v21.7.3']) {
    const m = runtimeRefusal(old, old.startsWith('v21'));
    t.match(m, new RegExp(`This is Node.js ${old}, and it is not supported`), old);
    t.match(m, /Node\.js 22 or later; 24 LTS/);
    t.match(m, /npm ci && npm start/);
    t.match(m, /node_modules\/\.bin\/node --v8-pool-size=0 packages\/node\/dist\/main\.js --config/, 'and the pinned binary, for a start with a config');
    t.match(m, /\.nvmrc/);
  }
  t.match(runtimeRefusal('v22.0.0', false), /gives no source text to revivers/);
});

t.test('this runtime hands revivers the source text', async (t) => {
  t.equal(hasJsonSourceText(), true);
});

// The machines this project is built on carry an old Node.js as /usr/bin/node; where one
// is found, the real entry point must refuse to start on it.
const OLD_NODE = ['/usr/bin/node', '/usr/local/bin/node'].find((p) => existsSync(p) && Number(/^v(\d+)/.exec(execFileSync(p, ['--version'], { encoding: 'utf8' }))?.[1]) < 22);
const MAIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'main.js');

t.test('the entry point exits with status 2 and the message on an unsupported Node.js', { skip: OLD_NODE === undefined ? 'no Node.js older than 22 on this machine' : false }, async (t) => {
  const r = spawnSync(OLD_NODE!, [MAIN, '--help'], { encoding: 'utf8' });
  t.equal(r.status, 2);
  t.match(r.stderr, /This is Node\.js v\d+\.\d+\.\d+, and it is not supported\. The agent-plane ledger runs on Node\.js 22 or later/);
});
