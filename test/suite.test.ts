// Proves the test suite's own configuration (.taprc) holds: what it runs alone exists,
// every file that starts a cluster is either among it or under test/process, whose
// files time nothing, and tap runs the files that run alone after all the others.
// Files not run alone run two at a time, where a cluster's elections and failovers
// would be timed against another test's load; and a file run alone between two others
// makes the pair before it finish first, leaving a CPU idle meanwhile.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parse } from 'yaml';

const ROOT = new URL('..', import.meta.url).pathname;
const ALONE = 'test/system';
/** Files that start node processes or clusters and run in pairs: they time nothing. */
const PAIRED = 'test/process';
/** A reading of the clock taken from another, which is how a test times something. */
const ELAPSED = /(Date\.now\(\)|performance\.now\(\))\s*-|process\.hrtime|\belapsed|\bstarted\s*=\s*(Date|performance)\.now/;

/** The entries of .taprc's `serial:` list (.taprc is YAML, as tap reads it). */
function serialEntries(): string[] {
  return (parse(readFileSync(join(ROOT, '.taprc'), 'utf8')) as { serial?: string[] }).serial ?? [];
}

/** Every `*.test.ts` under `dir`, relative to the repository, leaving out compiled output. */
function testFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.test.ts') && !f.startsWith('dist/'))
    .map((f) => relative(ROOT, join(ROOT, dir, f)));
}

t.test('.taprc runs the files under test/system alone, and they exist', async (t) => {
  t.same(serialEntries(), [ALONE], `.taprc's serial list is the one directory ${ALONE}`);
  t.ok(existsSync(join(ROOT, ALONE)), `${ALONE} exists`);
  t.ok(testFiles(ALONE).length >= 5, `${ALONE} holds ${testFiles(ALONE).length} test files`);
});

t.test('every test file that starts a cluster runs alone, or times nothing', async (t) => {
  const clusters = testFiles('test').filter((f) => /\b(startCluster|runChaos)\(/.test(readFileSync(join(ROOT, f), 'utf8')));
  t.ok(clusters.length >= 9, `${clusters.length} files start clusters`);
  for (const f of clusters) t.ok(f.startsWith(`${ALONE}/`) || f.startsWith(`${PAIRED}/`), `${f} is under ${ALONE} or ${PAIRED}`);
  const paired = testFiles(PAIRED);
  t.ok(paired.length >= 5, `${PAIRED} holds ${paired.length} test files`);
  for (const f of paired) t.notMatch(readFileSync(join(ROOT, f), 'utf8'), ELAPSED, `${f} measures no elapsed time`);
});

t.test('tap runs the files that run alone after every other file', async (t) => {
  const listed = spawnSync(join(ROOT, 'node_modules/.bin/tap'), ['list'], { cwd: ROOT, encoding: 'utf8' });
  t.equal(listed.status, 0, listed.stderr);
  const order = listed.stdout.trim().split('\n');
  const first = order.findIndex((f) => f.startsWith(`${ALONE}/`));
  t.ok(first > 0, `tap lists ${order.length} files, the first under ${ALONE} at ${first}`);
  t.same(order.slice(first).filter((f) => !f.startsWith(`${ALONE}/`)), [], `no other file comes after the first under ${ALONE}`);
  t.equal(order.length - first, testFiles(ALONE).length, `the last ${order.length - first} are all of ${ALONE}`);
});
