/**
 * Test support: the real server process, `node packages/node/dist/main.js`,
 * configured only through `APL_` environment variables, on free ports of 127.0.0.1.
 * Its addresses come from the `node_started` line it logs on stdout. Every process
 * started here is killed when the test process exits, whatever happened.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { killOnExit } from './cleanup.js';
import { PRINCIPALS, testCerts } from './node.js';

/** The repository: two levels up from test/support, three from its compiled test/dist/support. */
const HERE = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(HERE, ...(HERE.includes(`${'/'}dist${'/'}`) ? ['..', '..', '..'] : ['..', '..']));
export const MAIN_JS = join(REPO, 'packages/node/dist/main.js');
/**
 * The Node.js flags the node is started with, as `npm start`, deploy/Dockerfile and
 * scripts/cluster.mjs start it: V8's background threads one fewer than the CPUs
 * (docs/operations.md, "V8's background threads").
 */
export const NODE_FLAGS = ['--v8-pool-size=0'];

/** Sources of the server whose compiled file is older than they are: the build is stale. */
export function staleBuild(): string[] {
  const stale: string[] = [];
  for (const pkg of ['core', 'raft', 'node']) {
    const src = join(REPO, 'packages', pkg, 'src');
    for (const file of walk(src)) {
      if (!file.endsWith('.ts') || file.endsWith('.test.ts') || file.endsWith('.d.ts')) continue;
      const out = join(REPO, 'packages', pkg, 'dist', file.slice(src.length + 1).replace(/\.ts$/, '.js'));
      if (!existsSync(out) || statSync(out).mtimeMs < statSync(file).mtimeMs) stale.push(file.slice(REPO.length + 1));
    }
  }
  return stale;
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? walk(join(dir, d.name)) : [join(dir, d.name)]));
}

/**
 * The environment of a standalone node on `dataDir`: test CA and certificate, the test
 * principals, ports 0. A name `extra` sets to undefined is left out (the node's default).
 */
export function nodeEnv(dataDir: string, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const certs = testCerts();
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => !k.startsWith('APL_') && v !== undefined)) as Record<string, string>;
  const env: Record<string, string> = {
    ...inherited,
    APL_DATA_DIR: dataDir,
    APL_HOST: '127.0.0.1',
    APL_AGENT_PORT: '0',
    APL_ADMIN_PORT: '0',
    APL_TLS_CA: certs.ca,
    APL_TLS_CERT: certs.cert,
    APL_TLS_KEY: certs.key,
    APL_DEV_SETUP: 'false',
    APL_ADMIN_PRINCIPALS: JSON.stringify(PRINCIPALS),
    APL_LOG_LEVEL: 'info',
    // Small segments: a test writes megabytes, not the 64 MiB of zeros a default segment
    // costs, and the log moves to a new segment often.
    APL_RAFT_WAL_SEGMENT_BYTES: String(1 << 20),
  };
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

export interface NodeProcess {
  pid: number;
  agentUrl: string;
  adminUrl: string;
  /** Settles when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  alive(): boolean;
  /** Sends SIGKILL and waits for the exit. */
  kill(): Promise<void>;
  /** Sends SIGTERM (a graceful stop) and waits for the exit. */
  stop(): Promise<void>;
  /** The last lines of stdout and stderr, for a failure message. */
  output(): string;
}


const LINES_KEPT = 40;

/** Spawns the server with `env` and resolves once it has logged `node_started`. */
export function spawnNode(env: Record<string, string>, opts: { startTimeoutMs?: number; execPath?: string; mainJs?: string; nodeArgs?: string[]; args?: string[]; onEvent?: (line: string) => void } = {}): Promise<NodeProcess> {
  if (['warn', 'error', 'fatal', 'silent'].includes(env.APL_LOG_LEVEL ?? 'info')) {
    return Promise.reject(new Error(`APL_LOG_LEVEL=${env.APL_LOG_LEVEL}: the node_started line the addresses come from is logged at info`));
  }
  const child = spawn(opts.execPath ?? process.execPath, [...NODE_FLAGS, ...(opts.nodeArgs ?? []), opts.mainJs ?? MAIN_JS, ...(opts.args ?? [])], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  killOnExit(child);
  // The node logs a line per request; the lines about its state are kept apart so they are not crowded out.
  const tail: string[] = [];
  const events: string[] = [];
  const keep = (stream: string) => (line: string) => {
    const request = line.includes('"event":"request"');
    if (!request && stream === 'stdout') opts.onEvent?.(line);
    const kept = request ? tail : events;
    kept.push(`${stream}: ${line}`);
    if (kept.length > LINES_KEPT) kept.shift();
  };
  createInterface({ input: child.stderr! }).on('line', keep('stderr'));
  const stdout = createInterface({ input: child.stdout! });
  stdout.on('line', keep('stdout'));
  let exitedWith: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => {
    child.once('exit', (code, signal) => {
      exitedWith = { code, signal };
      r(exitedWith);
    });
  });
  const output = () => [...events, '...', ...tail.slice(-5)].join('\n');
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the node did not start in ${opts.startTimeoutMs ?? 15_000} ms\n${output()}`));
    }, opts.startTimeoutMs ?? 15_000);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`the node exited before it started (code ${code}, signal ${signal})\n${output()}`));
    });
    stdout.on('line', (line) => {
      if (!line.includes('"node_started"')) return;
      const m = JSON.parse(line) as { event?: string; agent?: string; admin?: string };
      if (m.event !== 'node_started' || !m.agent || !m.admin) return;
      clearTimeout(timer);
      resolvePromise({
        pid: child.pid!,
        agentUrl: m.agent,
        adminUrl: m.admin,
        exited,
        alive: () => exitedWith === null,
        kill: async () => {
          if (exitedWith === null) child.kill('SIGKILL');
          await exited;
        },
        stop: async () => {
          if (exitedWith === null) child.kill('SIGTERM');
          await exited;
        },
        output,
      });
    });
  });
}
