// Proves the README's walkthrough: every `$` command between its walkthrough
// markers runs, in order, in one bash session, as written, against a fresh node
// (the real server process with its development setup, on free ports of
// 127.0.0.1, apl pointed at it through its APL_ variables). Each command exits as
// the README shows (0; 3 for a refused verdict; non-zero for an `apl:` error, the
// exact code where the README shows `echo $?`), and its first line of output
// starts as the README's does.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testCerts } from './support/node.js';
import { REPO, nodeEnv, spawnNode } from './support/process.js';

t.setTimeout(120_000);

interface Step {
  command: string;
  /** output is what the README shows under the command; `…` lines elide. */
  output: string[];
}

/** The walkthrough's commands and their documented output. */
export function walkthrough(readme: string): Step[] {
  const start = readme.indexOf('<!-- walkthrough:');
  const end = readme.indexOf('<!-- end of walkthrough -->');
  if (start < 0 || end < start) throw new Error('the README has no walkthrough markers');
  const steps: Step[] = [];
  let fenced = false;
  for (const line of readme.slice(start, end).split('\n')) {
    if (line.startsWith('```')) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) continue;
    if (line.startsWith('$ ')) steps.push({ command: line.slice(2), output: [] });
    else steps[steps.length - 1]?.output.push(line);
  }
  return steps;
}

/** The first word of the output; of a JSON line, its text up to the first digit (ticks and indexes vary). */
function firstWord(lines: string[]): string {
  const word = (lines.find((l) => l.trim() !== '') ?? '').trim().split(/\s+/)[0] ?? '';
  return word.startsWith('{') ? word.replace(/\d.*$/, '') : word;
}

t.test('every command of the README walkthrough runs as the README shows', async (t) => {
  const steps = walkthrough(readFileSync(join(REPO, 'README.md'), 'utf8'));
  t.ok(steps.length >= 10, `${steps.length} commands`);
  const dir = mkdtempSync(join(tmpdir(), 'apl-readme-'));
  const node = await spawnNode(nodeEnv(dir, { APL_DEV_SETUP: 'true' }));
  t.teardown(async () => {
    await node.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  // One bash session: exports carry over, and `$?` is the previous README command's.
  // The marker after a command starts on a line of its own, whether or not its output ended one (curl's does not).
  const script = ['rc=0', ...steps.flatMap((s, i) => [`echo "@@cmd ${i}"`, '(exit $rc)', `{ ${s.command}\n} 2>&1`, 'rc=$?', `printf '\\n@@rc %d %d\\n' ${i} $rc`])].join('\n');
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('APL_')));
  const env = {
    ...inherited, PATH: `${join(REPO, 'node_modules/.bin')}:${process.env.PATH}`,
    APL_DATA_DIR: dir, APL_AGENT_URL: node.agentUrl, APL_ADMIN_URL: node.adminUrl, APL_CA: testCerts().ca,
  };
  const bash = spawn('bash', ['-c', script], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  bash.stdout.on('data', (c: Buffer) => (out += c.toString()));
  bash.stderr.on('data', (c: Buffer) => (out += c.toString()));
  await new Promise((r) => bash.on('close', r));

  const ran = new Map<number, { lines: string[]; rc: number }>();
  let current: { i: number; lines: string[] } | null = null;
  for (const line of out.split('\n')) {
    const cmd = /^@@cmd (\d+)$/.exec(line);
    const rc = /^@@rc (\d+) (\d+)$/.exec(line);
    if (cmd) current = { i: Number(cmd[1]), lines: [] };
    else if (rc && current) ran.set(current.i, { lines: current.lines, rc: Number(rc[2]) });
    else if (current && !line.startsWith('npm warn')) current.lines.push(line); // npm's notes about the machine's npmrc
  }

  steps.forEach((s, i) => {
    const r = ran.get(i);
    if (!r) return t.fail(`$ ${s.command} did not run`);
    const documented = firstWord(s.output);
    const why = `$ ${s.command}\n${r.lines.join('\n')}`.slice(0, 400);
    if (documented === 'apl:') t.not(r.rc, 0, `fails as documented: ${why}`);
    else if (/Rejected$/.test(documented)) t.equal(r.rc, 3, `a refusal exits 3: ${why}`);
    else t.equal(r.rc, 0, `succeeds: ${why}`);
    t.equal(firstWord(r.lines), documented, `its output starts as the README's: ${why}`);
  });
});
