// Proves that apl refuses an old Node.js with a message saying what to run instead,
// whether started as bin/apl.mjs or as dist/main.js: on a runtime that cannot read
// 128-bit JSON integers exactly, a command would otherwise fail with a stack trace.
// Either refuses before it loads any other module (the old runtime's coverage of what it
// loaded would be merged with this one's). And that a reader closing the pipe early
// (`apl --help | head -1`) ends apl quietly with the status it had, not with EPIPE's
// stack trace.
import t from 'tap';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The machines this project is built on carry an old Node.js as /usr/bin/node.
const OLD_NODE = ['/usr/bin/node', '/usr/local/bin/node'].find((p) => existsSync(p) && Number(/^v(\d+)/.exec(execFileSync(p, ['--version'], { encoding: 'utf8' }))?.[1]) < 22);
const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), '..');

for (const entry of ['bin/apl.mjs', 'dist/main.js']) {
  t.test(`${entry} exits with status 2 and what to run instead on an old Node.js`, { skip: OLD_NODE === undefined ? 'no Node.js older than 22 on this machine' : false }, async (t) => {
    const r = spawnSync(OLD_NODE!, [join(PACKAGE, entry), 'agent', 'balance', 'acct_x'], { encoding: 'utf8', env: { ...process.env, APL_AGENT_URL: 'https://127.0.0.1:1' } });
    t.equal(r.status, 2);
    t.match(r.stderr, /^apl: this is Node\.js v\d+\.\d+\.\d+, which cannot read 128-bit JSON integers exactly; apl needs Node\.js 22 or later\.\n {2}From the repository, run it through npm/);
    t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  });
}

t.test('a reader that closes the pipe early ends apl quietly', async (t) => {
  const child = spawn(process.execPath, [join(PACKAGE, 'bin/apl.mjs'), '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
  // The reading end is closed before apl writes: its first write fails with EPIPE.
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  t.equal(stderr, '', 'nothing on stderr');
  t.equal(code, 0, 'the status of the help it was printing');
});
