/**
 * Test support for the command line: `apl` run as a person or a script runs it (a
 * child process of bin/apl.mjs, none of the caller's `APL_` settings), and the
 * development node it is pointed at, in this process on free ports of 127.0.0.1.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigSchema, createLogger, devSetup, loadPrincipals, startNode, type RunningNode } from '@apl/node';
import { testCerts } from './node.js';
import { REPO } from './process.js';

export const APL = join(REPO, 'packages/cli/bin/apl.mjs');

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** This process's environment without any of apl's settings, as a fresh shell has it. */
export const withoutApl = (): Record<string, string> =>
  Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => !e[0].startsWith('APL_') && e[1] !== undefined));

/** Runs `command` in the repository with exactly `env`; answers its exit code and output, never throws. */
export function run(command: string, args: string[], env: Record<string, string>): Promise<Ran> {
  const child = spawn(command, args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

/** Runs apl with `env` on top of a fresh shell's environment. */
export function runApl(args: string[], env: Record<string, string>): Promise<Ran> {
  return run(process.execPath, [APL, ...args], { ...withoutApl(), ...env });
}

/** The settings that point apl at `node`, with its data directory and the test CA. */
export function aplEnv(node: RunningNode, dir: string): Record<string, string> {
  return { APL_DATA_DIR: dir, APL_AGENT_URL: node.agentUrl, APL_ADMIN_URL: node.adminUrl, APL_CA: testCerts().ca };
}

/**
 * A development node on `dir`, as `npm start` makes one (its admin tokens there), on
 * free ports; ticks an hour apart, so that nothing but the test moves the ledger.
 */
export async function startDevNode(dir: string): Promise<RunningNode> {
  const certs = testCerts();
  const config = ConfigSchema.parse({
    data_dir: dir, agent_port: 0, admin_port: 0, dev_setup: true, tls: { ca: certs.ca, cert: certs.cert, key: certs.key },
    tick_interval_ms: 3_600_000, log_level: 'silent',
  });
  devSetup(config);
  return startNode(config, loadPrincipals(config), { log: createLogger('silent', config.node_id) });
}

/** The hooks of a tap test file that the fixture below needs. */
interface Hooks {
  before(fn: () => Promise<void>): unknown;
  teardown(fn: () => Promise<void>): unknown;
}

/**
 * A development node for one test file, in a fresh directory (named from `prefix`),
 * up before its first test and stopped and removed after its last; `apl` runs against
 * it with `env` on top.
 */
export function devNodeFixture(t: Hooks, prefix: string): { dir: string; node: () => RunningNode; apl: (args: string[], env?: Record<string, string>) => Promise<Ran> } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let running: RunningNode | undefined;
  t.before(async () => {
    running = await startDevNode(dir);
  });
  t.teardown(async () => {
    await running?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const node = (): RunningNode => {
    if (running === undefined) throw new Error('the development node is not up yet (the fixture starts it before the first test)');
    return running;
  };
  return { dir, node, apl: (args, env = {}) => runApl(args, { ...aplEnv(node(), dir), ...env }) };
}
