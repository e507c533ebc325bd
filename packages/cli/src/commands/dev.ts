/**
 * `apl dev init`: bootstraps a running development node in one step, and `apl
 * cluster`: the group as a member sees it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command } from 'commander';
import { parseJson, type ApiError, type MembershipChange } from '@apl/client';
import { act } from '../context.js';
import { DEFAULT_PLAN, bootstrap, ensureIssuerKey, issuerFiles, type DevPlan } from '../dev.js';
import { UsageError, advising } from '../exit.js';
import { fields, table } from '../output.js';
import { DEFAULTS, type Settings } from '../settings.js';
import { withAdmin } from './admin.js';

interface InitOptions {
  issuer: string;
  party: string;
  agent: string;
  policy?: string;
  author: string;
  reviewer: string;
  approver: string;
}

/** The plan of `apl dev init`: the worked example's names, with the flags given. */
function planOf(o: InitOptions): DevPlan {
  const plan: DevPlan = { ...DEFAULT_PLAN, issuer: o.issuer, party: o.party, agent: o.agent };
  if (o.party !== DEFAULT_PLAN.party) {
    plan.accounts = DEFAULT_PLAN.accounts.map((a) => (a.party ? { ...a, party: o.party } : a));
    plan.usages = DEFAULT_PLAN.usages.map((u) => ({ ...u, owner: o.party }));
  }
  if (o.policy !== undefined) {
    if (!existsSync(o.policy)) throw new UsageError(`There is no policy file ${o.policy}.`);
    const doc = parseJson(readFileSync(o.policy, 'utf8')) as { id?: unknown; bundle?: unknown };
    if (typeof doc.id !== 'string' || doc.bundle === undefined) throw new UsageError(`The policy file ${o.policy} must hold {"id": ..., "bundle": {...}}.`);
    plan.policy = { id: doc.id, bundle: doc.bundle };
  }
  return plan;
}

export function devCommand(): Command {
  const dev = new Command('dev').description('development setup');
  dev.command('init')
    .description('bootstrap a running node in one step: issuer key, trust root, party, agent binding, accounts, a usage balance, and a policy through four eyes')
    .option('--issuer <name>', 'issuer of attestations', DEFAULT_PLAN.issuer)
    .option('--party <id>', 'the party', DEFAULT_PLAN.party)
    .option('--agent <uri>', 'the agent bound to it', DEFAULT_PLAN.agent)
    .option('--policy <file>', '{id, bundle} to activate (default: docs/examples/policy.json\'s pol_2026_11)')
    .option('--author <principal>', 'drafts the policy, and adds the rest (needs author and operator)', 'dev-author')
    .option('--reviewer <principal>', 'reviews it', 'dev-reviewer')
    .option('--approver <principal>', 'approves and activates it', 'dev-approver')
    .action(act<InitOptions>(async ({ s, out }, _args, o) => {
      const plan = planOf(o);
      const files = issuerFiles(s.issuerDir);
      const key = ensureIssuerKey(files);
      const clients = { operator: s.admin(o.author), author: s.admin(o.author), reviewer: s.admin(o.reviewer), approver: s.admin(o.approver) };
      try {
        const made = await bootstrap(clients, { operator: o.author, author: o.author, reviewer: o.reviewer, approver: o.approver }, plan, key);
        writeFileSync(files.profile, `${JSON.stringify({ issuer: plan.issuer, agent: plan.agent }, null, 2)}\n`);
        const all = [{ what: 'issuer key', id: files.key, status: key.made ? 'made' : 'exists', by: 'apl' }, ...made];
        const next = nextCommands(s);
        out.result({ made: all, issuer: plan.issuer, agent: plan.agent, policy: plan.policy.id, issuer_key: files.key, next }, () => [
          `${s.urls('admin').length === 1 ? 'node at' : 'cluster at'} ${s.urls('admin').join(', ')} is bootstrapped:`,
          table(all, [['what', 'what'], ['id', 'id'], ['status', 'status'], ['by', 'by']]),
          '',
          'Next, as the agent:',
          ...next.map((c) => `  ${c}`),
        ].join('\n'));
      } finally {
        for (const c of Object.values(clients)) c.close();
      }
    }));
  return dev;
}

/** A word for a POSIX shell: as it is when it is safe, else single-quoted. */
const shellWord = (w: string) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", "'\\''")}'`);

/**
 * The agent's first commands, with the agent plane, the data directory and the CA this
 * invocation used (the last two when they are not the defaults), so that they work
 * pasted into a shell without this one's flags or variables.
 */
function nextCommands(s: Settings): string[] {
  const where = [
    ...(s.dataDir !== resolve(DEFAULTS.dataDir) ? ['--data-dir', s.dataDir] : []),
    ...(s.o.ca !== undefined ? ['--ca', resolve(s.o.ca)] : []),
  ];
  const apl = (args: string[]) => ['npx', 'apl', ...args].map(shellWord).join(' ');
  return [
    `export APL_ATTESTATION=$(${apl([...where, 'agent', 'attest'])})`,
    apl(['--agent-url', s.urls('agent').join(','), ...where, 'agent', 'submit', '--file', 'docs/examples/intent.json']),
  ];
}

/** Where a member's view of the cluster, not the primary's, says to ask for the lag. */
function primaryHint(c: { leader: string | null; members: { id: string; admin_url?: string | null }[] }): string {
  const at = c.members.find((m) => m.id === c.leader)?.admin_url;
  const ask = c.leader === null ? 'no primary is known here' : at ? `ask it: apl --admin-url ${at} cluster status` : `the primary is ${c.leader}: give its admin address (--admin-url)`;
  return `\nonly the primary knows each member's match index, lag and contact, and none of the admin addresses given is the primary's; ${ask}`;
}

export function clusterCommand(): Command {
  const cluster = new Command('cluster').description('the replicated group');
  cluster.command('status').description('voters, learners, each member\'s role and lag, term, commit and applied index, as the primary sees them when it is among the admin addresses given (else as the member that answered)')
    .action(act(async (ctx) => {
      let c = await withAdmin(ctx, (a) => a.getCluster());
      // Only the primary knows each member's match index and lag: ask the other
      // addresses given for its view (never an address that was not given).
      if (c.role !== 'leader') {
        for (const url of ctx.s.urls('admin')) {
          const a = ctx.s.admin(undefined, url);
          const view = await a.getCluster().catch(() => null).finally(() => a.close());
          if (view?.role === 'leader') {
            c = view;
            break;
          }
        }
      }
      ctx.out.result(c, () => [
        fields([
          ['node', `${c.node} (${c.role})`], ['leader', c.leader ?? 'none known'], ['term', c.term], ['commit index', c.commit_index], ['applied index', c.applied_index],
          ['voters', c.voters.join(', ')], ['learners', c.learners.join(', ') || 'none'], ['removed', c.removed.join(', ') || 'none'],
        ]),
        table(c.members.map((m) => ({ ...m, contact: m.reachable === null ? '-' : m.reachable ? 'ok' : 'unreachable' })),
          [['id', 'member'], ['role', 'role'], ['agent_url', 'agent plane'], ['peer_addr', 'peer'], ['match_index', 'match index'], ['lag', 'lag'], ['contact', 'contact']]),
        ...(c.role === 'leader' || c.members.length < 2 ? [] : [primaryHint(c)]),
      ].join('\n'));
    }));
  // invalid_transition and already_exists are also the policy lifecycle's codes: here they are about membership.
  const MEMBERSHIP_ADVICE = {
    invalid_transition: (e: ApiError) => (/ids are never reused/.test(e.message)
      ? 'Start the replacement under a new id, with a certificate that names it, and add that id.'
      : 'apl cluster status shows the voters, the learners and each one\'s lag: change one member at a time, and promote a learner once its lag is near 0.'),
    already_exists: 'apl cluster status lists the members in force.',
  };
  const changed = (m: MembershipChange, what: string) => `${what} at index ${m.index}; voters ${m.voters.join(', ')}; learners ${m.learners.join(', ') || 'none'}`;
  cluster.command('add').argument('<id>').argument('<peer-addr>', 'its peer-mesh address, host:port')
    .argument('<agent-url>', 'its agent-plane URL').argument('[admin-url]', 'its admin-plane URL')
    .description('add a member as a learner (operator); start it first with cluster_state join')
    .action(act(async (ctx, [id, peerAddr, agentUrl, adminUrl]) => {
      const body = { id: id!, peer_addr: peerAddr!, agent_url: agentUrl!, ...(adminUrl ? { admin_url: adminUrl } : {}) };
      const m = await advising(MEMBERSHIP_ADVICE, () => withAdmin(ctx, (a) => a.addMember(body)));
      ctx.out.result(m, () => `${changed(m, `added ${m.id} as a learner`)}\npromote it once apl cluster status shows its lag near 0: apl cluster promote ${m.id}`);
    }));
  cluster.command('promote').argument('<id>').description('promote a learner that has caught up to a voter (operator)')
    .action(act(async (ctx, [id]) => {
      const m = await advising(MEMBERSHIP_ADVICE, () => withAdmin(ctx, (a) => a.promoteMember(id!)));
      ctx.out.result(m, () => changed(m, `promoted ${m.id}`));
    }));
  cluster.command('remove').argument('<id>').description('remove a member, voter or learner (operator); a primary hands over first')
    .action(act(async (ctx, [id]) => {
      const m = await advising(MEMBERSHIP_ADVICE, () => withAdmin(ctx, (a) => a.removeMember(id!)));
      ctx.out.result(m, () => `${changed(m, `removed ${m.id}`)}\nstop its process: it serves nothing any more`);
    }));
  cluster.command('transfer').argument('<member>').description('ask the primary to hand leadership over to a member (operator)')
    .action(act(async (ctx, [to]) => {
      const t = await advising(MEMBERSHIP_ADVICE, () => withAdmin(ctx, (a) => a.transferLeadership({ to: to! })));
      ctx.out.result(t, () => (t.transferring_to === null ? `${t.leader} leads already: nothing moves` : `leadership is moving from ${t.leader} to ${t.transferring_to}: follow it with apl cluster status`));
    }));
  return cluster;
}
