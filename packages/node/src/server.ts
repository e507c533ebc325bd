/**
 * The server process, once main.ts has checked the runtime: configuration, first-start
 * development setup, the node, and a graceful stop on SIGINT and SIGTERM.
 */
import { createServer } from 'node:net';
import { constants as osConstants } from 'node:os';
import { parseArgs } from 'node:util';
import type { Status } from '@apl/raft';
import { ConfigError, envName, listeners, loadConfig, peerPortMismatch, tlsFiles, tokensFile, unknownVariables, type Config } from './config.js';
import { DataDirLock } from './data-lock.js';
import { devSetup, devSetupMakesTls, loadPrincipals } from './devsetup.js';
import { certificateMember, readTls, startNode, type RunningNode } from './node.js';

const USAGE = `usage: node packages/node/dist/main.js [--config <file.json>]

Every setting has a default and an APL_ environment variable (APL_AGENT_PORT,
APL_ADMIN_PORT, APL_DATA_DIR, APL_LIMITS_BODY_BYTES_MAX, ...). See docs/operations.md.`;

/**
 * The group this node is in, as the configuration in force says (the log's, else the
 * bootstrap members): standalone only for a group of one.
 */
function groupPhrase(conf: Status['conf'], self: string): string {
  if (![...conf.voters, ...conf.learners].includes(self)) return 'not yet a member: it waits for an operator to add it to the cluster';
  if (conf.voters.length + conf.learners.length === 1) return 'standalone';
  const learners = conf.learners.length > 0 ? `; learners ${conf.learners.join(', ')}` : '';
  return `cluster of ${conf.voters.length}: ${conf.voters.join(', ')}${learners}`;
}

/** The configuration once read: a start that fails after it is explained in its terms. */
let config: Config | null = null;

async function main(): Promise<void> {
  let values: { config?: string | undefined; help?: boolean | undefined };
  try {
    ({ values } = parseArgs({ options: { config: { type: 'string' }, help: { type: 'boolean' } } }));
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n\n${USAGE}`);
  }
  if (values.help) {
    console.log(USAGE);
    return;
  }
  config = loadConfig({ file: values.config });
  // The TLS files are checked before the data directory is touched (a refused start
  // leaves nothing behind), except those the development setup is about to make in it,
  // which are checked as the node starts.
  if (!devSetupMakesTls(config)) readTls(tlsFiles(config), certificateMember(config), config.node_id);
  // A port another process holds is found before the data directory is made or
  // written: a refused start leaves nothing behind. (The node binds them for good later.)
  await portsFree(config);
  // A node already running on the directory is found before the development setup
  // writes anything into it (certificates, tokens); the node takes the lock for good
  // as it opens its stores.
  await (await DataDirLock.take(config.data_dir)).release();
  const made = devSetup(config);
  // Stopped for good (a restart cannot help): said on stderr, and exit status 2, as a
  // refused start; the node is closed first once it has started.
  let started: RunningNode | null = null;
  const onFatal = (message: string): void => {
    process.stderr.write(`${message}\n`);
    void (started?.close() ?? Promise.resolve()).finally(() => process.exit(2));
  };
  // SIGINT and SIGTERM are taken from before the node starts: one that comes while it
  // starts (the node_started line, which a supervisor may answer with a SIGTERM at once,
  // is logged before the start returns here) stops it gracefully as soon as it has
  // started. A second one before then ends the process at once.
  let stopping: NodeJS.Signals | null = null;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping !== null) {
      if (started === null) process.exit(128 + osConstants.signals[signal]);
      return;
    }
    stopping = signal;
    if (started !== null) stopGracefully(started, signal);
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  const node = await startNode(config, loadPrincipals(config), { onFatal });
  started = node;
  const tls = tlsFiles(config);
  const lines = [
    '',
    `agent-plane ledger: node ${config.node_id} is up (${groupPhrase(node.replica.status().conf, config.node_id)}).`,
    ...made.map((m) => `  made ${m}`),
    `  agent plane  ${node.agentUrl}   OpenAPI: ${node.agentUrl}/api/openapi.json`,
    `  admin plane  ${node.adminUrl}   tokens: ${tokensFile(config)}`,
    `  data         ${config.data_dir}   CA: ${tls.ca}`,
    '',
    'Next:',
    `  curl --cacert ${tls.ca} ${node.agentUrl}/readyz`,
    `  TOKEN=$(node -p "require('${tokensFile(config)}')['dev-author'].token")`,
    `  curl --cacert ${tls.ca} -H "Authorization: Bearer $TOKEN" ${node.adminUrl}/admin/v1/cluster`,
    '',
  ];
  const mismatch = peerPortMismatch(config);
  if (mismatch !== null) {
    lines.splice(2, 0, `  warning: ${mismatch.message}`);
    node.log.warn({ event: 'peer_port_mismatch', peer_addr: mismatch.peer_addr, peer_port: mismatch.peer_port }, mismatch.message);
  }
  for (const v of unknownVariables(process.env)) {
    lines.splice(2, 0, `  ignored ${v.name}: no setting has that variable${v.nearest === null ? '' : `; did you mean ${v.nearest}?`}`);
    node.log.warn({ event: 'unknown_variable', variable: v.name, nearest: v.nearest }, 'an APL_ variable that sets nothing');
  }
  process.stderr.write(`${lines.join('\n')}\n`);
  if (stopping !== null) stopGracefully(node, stopping);
}

/** Stops the node (leadership handed over, requests in flight answered), then the process. */
function stopGracefully(node: RunningNode, signal: NodeJS.Signals): void {
  node.log.info({ event: 'signal', signal }, 'stopping');
  node.close().then(() => process.exit(0), (err: Error) => {
    node.log.error({ event: 'stop_failed', err: err.message }, 'stop failed');
    process.exit(1);
  });
}

main().catch((err: Error) => {
  const refusal = err instanceof ConfigError ? err.message : config === null ? null : listenRefusal(err, config);
  if (refusal !== null) {
    process.stderr.write(`${refusal}\n`);
    process.exit(2);
  }
  process.stderr.write(`fatal: ${err.stack ?? err.message}\n`);
  process.exit(1);
});

/** Binds each configured port a moment and lets it go: throws the bind's error (EADDRINUSE, ...) for the first that cannot be. */
async function portsFree(c: Config): Promise<void> {
  for (const { port } of listeners(c).filter((l) => l.port !== 0)) {
    await new Promise<void>((resolve, reject) => {
      const probe = createServer();
      probe.once('error', reject);
      probe.listen(port, c.host, () => probe.close(() => resolve()));
    });
  }
}

/** A listener that could not bind, said with the setting that names its port; null for any other failure. */
function listenRefusal(err: Error, c: Config): string | null {
  const e = err as NodeJS.ErrnoException & { port?: number; address?: string };
  if (e.syscall !== 'listen' || e.port === undefined) return null;
  const which = listeners(c).find((l) => l.port === e.port);
  const setting = which === undefined ? '' : ` for ${which.what} (${which.key}, ${envName([which.key])})`;
  const why = e.code === 'EADDRINUSE' ? 'another process listens there' : e.code === 'EACCES' ? 'this user may not bind it' : e.code === 'EADDRNOTAVAIL' ? `${e.address} is not an address of this machine (host, APL_HOST)` : e.message;
  return `cannot listen on ${e.address}:${e.port}${setting}: ${why} (${e.code}). Stop what holds it, or give this node another port.`;
}
