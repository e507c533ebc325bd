/**
 * The options of a benchmark that choose the server it starts, read and checked
 * before the benchmark loads anything heavier: a refused option answers at once,
 * without loading the node's packages (server.ts) first.
 */
import { existsSync } from 'node:fs';

export interface ServerOptions {
  /** the Node.js binary to run the server on (default: this process's). */
  execPath?: string;
  /** the server's main.js (default: this checkout's), to measure another build on the same machine. */
  mainJs?: string;
  /** write a CPU profile into this directory when the server stops. */
  cpuProfDir?: string;
  /** load the allocation sampler (alloc-sampler.ts), which writes its profile into this directory. */
  allocProfDir?: string;
  /** an existing data directory (a restart); default: a fresh one. */
  dataDir?: string;
  env?: Record<string, string>;
  startTimeoutMs?: number;
  /**
   * a directory elsewhere (another device) for the Raft log: a directory of the run's own
   * is made in it, and `<data_dir>/wal` a symbolic link to that one before the server
   * starts, as an operator mounts a device there; only that one is removed after.
   */
  walDir?: string;
}

/** The options of a benchmark that choose the server it starts (see `serverOptions`). */
export const SERVER_ARGS = {
  main: { type: 'string' },
  'wal-dir': { type: 'string' },
  'server-env': { type: 'string', multiple: true },
} as const;

/**
 * The server a benchmark's command line asks for: `--main` another build's main.js,
 * `--wal-dir` the Raft log on another filesystem, `--server-env APL_NAME=value`
 * (repeatable) the server's configuration, `--server-env NODE_OPTIONS=...` the
 * flags of the server's Node.js alone (the load generator runs without them), or
 * `--server-env UV_THREADPOOL_SIZE=n` the size of its libuv pool.
 */
export function serverOptions(
  a: { main?: string; 'wal-dir'?: string; 'server-env'?: string[] },
  refuse: (why: string) => never = (why) => { throw new Error(why); },
): ServerOptions {
  const env = Object.fromEntries((a['server-env'] ?? []).map((kv) => {
    const m = /^(APL_[A-Z0-9_]+|NODE_OPTIONS|UV_THREADPOOL_SIZE)=(.*)$/s.exec(kv);
    if (!m) refuse(`--server-env ${kv}: expected APL_NAME=value, NODE_OPTIONS=flags or UV_THREADPOOL_SIZE=n`);
    return [m[1]!, m[2]!];
  }));
  // The benchmark reads the server's addresses from its node_started line, logged at info.
  if (['warn', 'error', 'fatal', 'silent'].includes(env.APL_LOG_LEVEL ?? 'info')) refuse(`--server-env APL_LOG_LEVEL=${env.APL_LOG_LEVEL}: the benchmark needs the server's info lines (its addresses are in node_started); leave the level at info or debug`);
  if (a.main !== undefined && !existsSync(a.main)) refuse(`--main ${a.main}: no such file (another build's packages/node/dist/main.js)`);
  return { env, ...(a.main === undefined ? {} : { mainJs: a.main }), ...(a['wal-dir'] === undefined ? {} : { walDir: a['wal-dir'] }) };
}
