// Proves the published contract passes a standard OpenAPI linter: Redocly CLI with
// its recommended rules (redocly.yaml at the repository root) reports no error and
// no warning on either committed document and ignores no problem, and it runs
// without reaching the network.
import t from 'tap';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CLI = createRequire(import.meta.url).resolve('@redocly/cli/bin/cli.js');

/**
 * Loaded into the linter's process: any socket or DNS lookup is refused and named on
 * stderr, so a linter that tries to reach the network fails the test that ran it.
 */
const NO_NETWORK = `data:text/javascript,${encodeURIComponent(`
import net from 'node:net';
import dns from 'node:dns';
const refuse = (what) => { process.stderr.write('network refused: ' + what + '\\n'); throw new Error('network refused: ' + what); };
net.Socket.prototype.connect = function (o) { refuse('connect ' + JSON.stringify(o?.host ?? o?.path ?? o)); };
dns.lookup = (host) => refuse('lookup ' + host);
dns.promises.lookup = async (host) => refuse('lookup ' + host);
`)}`;

interface Problem {
  ruleId: string;
  severity: string;
  message: string;
  location: { pointer: string; start?: { line: number } }[];
}
interface Report {
  totals: { errors: number; warnings: number; ignored: number };
  problems: Problem[];
}

/** Runs `redocly lint` on one document with the project's configuration, as JSON. */
async function lint(file: string): Promise<{ code: number; report: Report; stderr: string }> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    // Only the network guard: not tap's loader or its coverage of a 15 MB bundle.
    NODE_OPTIONS: `--import=${NO_NETWORK}`,
    // In a terminal the CLI asks the npm registry, once a day, whether it is current.
    REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
  };
  delete env.NODE_V8_COVERAGE;
  const args = [CLI, 'lint', file, '--config', 'redocly.yaml', '--format', 'json'];
  const run = promisify(execFile);
  try {
    const { stdout, stderr } = await run(process.execPath, args, { cwd: ROOT, env, maxBuffer: 16 << 20 });
    return { code: 0, report: JSON.parse(stdout) as Report, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    if (typeof e.code !== 'number' || !e.stdout) throw err;
    return { code: e.code, report: JSON.parse(e.stdout) as Report, stderr: e.stderr ?? '' };
  }
}

const describe = (p: Problem) => `${p.severity} ${p.ruleId} at ${p.location[0]?.pointer ?? '?'} (line ${p.location[0]?.start?.line ?? '?'}): ${p.message}`;

for (const file of ['packages/node/openapi/agent-plane.json', 'packages/node/openapi/admin-plane.json']) {
  t.test(`redocly lint with the recommended rules finds nothing in ${file}`, async (t) => {
    const { code, report, stderr } = await lint(file);
    t.strictSame(report.problems.map(describe), [], 'no problem: fix the generator (openapi.ts) or the schemas, then npm run openapi');
    t.strictSame(report.totals, { errors: 0, warnings: 0, ignored: 0 });
    t.equal(code, 0, 'the linter exits 0');
    t.notMatch(stderr, /network refused/, 'the linter reached for no network');
  });
}
