/**
 * The `apl` command: its global options, its command groups, and the run that turns
 * any failure into a message, advice and an exit code (exit.ts lists them).
 */
import { Command, CommanderError, Option } from 'commander';
import { stringifyJson } from '@apl/client';
import { outcome } from './context.js';
import { adminCommand } from './commands/admin.js';
import { agentCommand } from './commands/agent.js';
import { clusterCommand, devCommand } from './commands/dev.js';
import { feedCommand } from './commands/feed.js';
import { logCommand } from './commands/log.js';
import { EXIT, failure, type ExitCode } from './exit.js';
import { DEFAULTS, Settings, type GlobalOptions } from './settings.js';

const EXIT_CODES_HELP = `
Exit codes:
  0  done (an intent: Permitted and posted)
  1  unexpected failure (a bug)
  2  wrong command line or local setup (flag, file, attestation, token)
  3  the intent was judged and refused by the policy (recorded, not posted)
  4  the node refused the request (an error answer 4xx)
  5  no usable answer (no node, TLS, time-out, 5xx or 503 after retries)
  6  verification failed (apl log verify)`;

export function program(): Command {
  const p = new Command('apl')
    .description('The command line of the agent-plane ledger: operators, agent authors and auditors.')
    .addOption(new Option('--data-dir <dir>', 'the development node\'s data directory: CA, admin tokens, issuer').env('APL_DATA_DIR').default(DEFAULTS.dataDir))
    .addOption(new Option('--agent-url <urls>', 'agent-plane address, or every replica\'s, comma-separated').env('APL_AGENT_URL').default(DEFAULTS.agentUrl))
    .addOption(new Option('--admin-url <urls>', 'admin-plane address, or every replica\'s, comma-separated').env('APL_ADMIN_URL').default(DEFAULTS.adminUrl))
    .addOption(new Option('--ca <pem>', 'CA to trust (default: <data-dir>/certs/ca.pem when it exists)').env('APL_CA'))
    .addOption(new Option('--cert <pem>', 'a client certificate, for an admin plane that requires one (admin_client_certs); with --key').env('APL_CERT'))
    .addOption(new Option('--key <pem>', 'the key of --cert').env('APL_KEY'))
    .addOption(new Option('--tokens <file>', 'admin tokens file (default: <data-dir>/admin-tokens.json)').env('APL_ADMIN_TOKENS_FILE'))
    .addOption(new Option('--as <principal>', 'admin principal to act as, from the tokens file').env('APL_AS').default(DEFAULTS.as))
    .addOption(new Option('--token <token>', 'admin token (instead of --as and the tokens file)').env('APL_ADMIN_TOKEN'))
    .addOption(new Option('--attestation <token>', 'the agent\'s attestation, for agent commands').env('APL_ATTESTATION'))
    .option('--json', 'print one JSON document (128-bit integers as bare numbers) instead of tables')
    .addHelpText('after', EXIT_CODES_HELP)
    .showHelpAfterError('(apl --help lists the commands and options)')
    .exitOverride();
  for (const c of [devCommand(), adminCommand(), agentCommand(), clusterCommand(), logCommand(), feedCommand()]) {
    p.addCommand(c);
  }
  // Every subcommand answers a usage error with exit 2 rather than exiting by itself.
  const override = (c: Command) => {
    c.exitOverride();
    c.commands.forEach(override);
  };
  override(p);
  return p;
}

/** Runs apl with `argv` (without node and the script); resolves with the exit code. */
export async function run(argv: string[]): Promise<ExitCode> {
  const p = program();
  outcome.exit = EXIT.ok;
  try {
    await p.parseAsync(argv, { from: 'user' });
    return outcome.exit;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and the version are not failures; everything else commander refuses is a usage error.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const o = p.opts() as GlobalOptions;
    const s = new Settings(o);
    const f = failure(err, { caFile: safe(() => s.caFile), tokensFile: s.tokensFile });
    if (o.json) {
      process.stdout.write(`${stringifyJson({ error: { code: f.code, message: f.message, hint: f.hint, ...(f.status ? { status: f.status } : {}), ...(f.body ? { body: f.body } : {}) } }, 2)}\n`);
    } else {
      process.stderr.write(`apl: ${f.message}\n${f.hint ? `${f.hint.replace(/^/gm, '  ')}\n` : ''}`);
    }
    return f.exit;
  }
}

function safe<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}
