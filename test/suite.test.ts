// Proves the test suite's own configuration (.taprc) holds: the files it runs alone
// exist, and every file that starts a cluster is among them. Files not listed run two
// at a time, where a cluster's elections and failovers would be timed against another
// test's load.
import t from 'tap';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = new URL('..', import.meta.url).pathname;

/** The entries of .taprc's `serial:` list. */
function serialFiles(): string[] {
  const lines = readFileSync(join(ROOT, '.taprc'), 'utf8').split('\n');
  const start = lines.indexOf('serial:');
  const out: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const m = /^ {2}- (\S+)$/.exec(line);
    if (!m) break;
    out.push(m[1]!);
  }
  return out;
}

t.test('the files .taprc runs alone exist', async (t) => {
  const serial = serialFiles();
  t.ok(serial.length > 0, `.taprc lists ${serial.length} files to run alone`);
  for (const f of serial) t.ok(existsSync(join(ROOT, f)), `${f} exists`);
});

t.test('every test file that starts a cluster runs alone', async (t) => {
  const serial = new Set(serialFiles());
  const clusters = readdirSync(join(ROOT, 'test'))
    .filter((f) => f.endsWith('.test.ts'))
    .filter((f) => /\b(startCluster|runChaos)\(/.test(readFileSync(join(ROOT, 'test', f), 'utf8')));
  t.ok(clusters.length >= 9, `${clusters.length} files start clusters`);
  for (const f of clusters) t.ok(serial.has(`test/${f}`), `test/${f} is in .taprc's serial list`);
});
