/**
 * The server process, once main.ts has checked the runtime: configuration, first-start
 * development setup, the node, and a graceful stop on SIGINT and SIGTERM.
 */
import { parseArgs } from 'node:util';
import type { Status } from '@apl/raft';
import { ConfigError, loadConfig, tlsFiles, tokensFile } from './config.js';
import { devSetup, loadPrincipals } from './devsetup.js';
import { startNode } from './node.js';

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

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string' }, help: { type: 'boolean' } } });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const config = loadConfig({ file: values.config });
  const made = devSetup(config);
  const node = await startNode(config, loadPrincipals(config));
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
  process.stderr.write(`${lines.join('\n')}\n`);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    node.log.info({ event: 'signal', signal }, 'stopping');
    node.close().then(() => process.exit(0), (err: Error) => {
      node.log.error({ event: 'stop_failed', err: err.message }, 'stop failed');
      process.exit(1);
    });
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((err: Error) => {
  if (err instanceof ConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`fatal: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
