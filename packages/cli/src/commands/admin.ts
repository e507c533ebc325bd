/**
 * Admin commands: one per route of the administrative plane, acting as the
 * principal `--as` names (or the token `--token` gives).
 */
import { existsSync, readFileSync } from 'node:fs';
import { Command } from 'commander';
import { PAGE_LIMIT_MAX, parseJson, type AdminClient } from '@apl/client';
import { act, type Ctx } from '../context.js';
import { UsageError } from '../exit.js';
import { fields, table } from '../output.js';
import { listing, more, paged, type PageFlags } from '../paging.js';
import { describePolicy } from './agent.js';

/** Runs `f` with an admin client of the configured principal, closing it after. */
async function withAdmin<T>(ctx: Ctx, f: (a: AdminClient) => Promise<T>): Promise<T> {
  const a = ctx.s.admin();
  try {
    return await f(a);
  } finally {
    a.close();
  }
}

function readFile(path: string, what: string): string {
  if (!existsSync(path)) throw new UsageError(`There is no ${what} file ${path}.`);
  return readFileSync(path, 'utf8');
}

const usageView = (u: { usage: string; currency: string; owner: string | null; consumed: bigint; metered: bigint; billed: bigint; text: string }) =>
  `${fields([['usage', `${u.usage} (${u.currency})`], ['owner', u.owner ?? 'none'], ['consumed', u.consumed], ['metered', u.metered], ['billed', u.billed]])}\n${u.text}`;

const accountView = (b: { account: string; party: string | null; balances: { currency: string; debits: bigint; credits: bigint; net: bigint }[] }) =>
  `${b.account} (${b.party ?? 'house account'})\n${table(b.balances, [['currency', 'currency'], ['debits', 'debits'], ['credits', 'credits'], ['net', 'net']])}`;

function trustRoots(): Command {
  const c = new Command('trust-root').description('issuers whose attestations the ledger accepts');
  c.command('add').argument('<issuer>').argument('<public-key-file>', 'Ed25519 public key: PEM, or PASERK k4.public')
    .description('register an issuer and its public key')
    .action(act(async (ctx, [issuer, file]) => {
      const r = await withAdmin(ctx, (a) => a.addTrustRoot({ issuer: issuer!, public_key: readFile(file!, 'public key').trim() }));
      ctx.out.result(r, () => fields([['trust root', r.issuer], ['key id', r.key_id]]));
    }));
  paged(c.command('list').description('the trust roots, a page at a time in issuer order')).action(act<PageFlags>(async (ctx, _args, o) => {
    const r = await withAdmin(ctx, (a) => listing(o, 'trust_roots', (p) => a.listTrustRoots(p)));
    ctx.out.result(r, () => `${table(r.trust_roots, [['issuer', 'issuer'], ['key_id', 'key id']])}${more(r)}`);
  }));
  c.command('remove').argument('<issuer>').description('remove a trust root: its attestations are refused from then on')
    .action(act(async (ctx, [issuer]) => {
      const r = await withAdmin(ctx, (a) => a.removeTrustRoot(issuer!));
      ctx.out.result(r, () => `removed trust root ${r.issuer} (${r.key_id})`);
    }));
  return c;
}

function parties(): Command {
  const c = new Command('party').description('parties: who owns accounts, balances and agents');
  c.command('add').argument('<id>').description('create a party').action(act(async (ctx, [id]) => {
    const r = await withAdmin(ctx, (a) => a.addParty({ id: id! }));
    ctx.out.result(r, () => `party ${r.id}`);
  }));
  paged(c.command('list').description('the parties, a page at a time in id order')).action(act<PageFlags>(async (ctx, _args, o) => {
    const r = await withAdmin(ctx, (a) => listing(o, 'parties', (p) => a.listParties(p)));
    ctx.out.result(r, () => `${table(r.parties, [['id', 'party']])}${more(r)}`);
  }));
  return c;
}

function agents(): Command {
  const c = new Command('agent').description('bindings of agent URIs to parties');
  c.command('bind').argument('<agent-uri>').argument('<party>').description('bind an agent to a party').action(act(async (ctx, [agent, party]) => {
    const r = await withAdmin(ctx, (a) => a.bindAgent({ agent: agent!, party: party! }));
    ctx.out.result(r, () => `${r.agent} -> ${r.party}`);
  }));
  c.command('unbind').argument('<agent-uri>').description('unbind an agent').action(act(async (ctx, [agent]) => {
    const r = await withAdmin(ctx, (a) => a.unbindAgent(agent!));
    ctx.out.result(r, () => `${r.agent} is unbound`);
  }));
  paged(c.command('list').description('the bindings, a page at a time in agent order')).action(act<PageFlags>(async (ctx, _args, o) => {
    const r = await withAdmin(ctx, (a) => listing(o, 'agents', (p) => a.listAgents(p)));
    ctx.out.result(r, () => `${table(r.agents, [['agent', 'agent'], ['party', 'party']])}${more(r)}`);
  }));
  return c;
}

function accounts(): Command {
  const c = new Command('account').description('accounts (balances per currency)');
  c.command('open').argument('<id>').option('--party <party>', 'the owning party (default: a house account)').description('open an account')
    .action(act<{ party?: string }>(async (ctx, [id], o) => {
      const r = await withAdmin(ctx, (a) => a.openAccount({ id: id!, ...(o.party ? { party: o.party } : {}) }));
      ctx.out.result(r, () => accountView(r));
    }));
  c.command('show').argument('<id>').description('an account (not party-scoped)').action(act(async (ctx, [id]) => {
    const r = await withAdmin(ctx, (a) => a.getAccount(id!));
    ctx.out.result(r, () => accountView(r));
  }));
  return c;
}

function usages(): Command {
  const c = new Command('usage').description('usage balances (consumed, metered, billed)');
  c.command('open').argument('<id>').requiredOption('--currency <code>', 'the one currency of every move').option('--owner <party>', 'the owning party (default: none)')
    .description('open a usage balance')
    .action(act<{ currency: string; owner?: string }>(async (ctx, [id], o) => {
      const r = await withAdmin(ctx, (a) => a.openUsage({ id: id!, currency: o.currency, ...(o.owner ? { owner: o.owner } : {}) }));
      ctx.out.result(r, () => usageView(r));
    }));
  c.command('show').argument('<id>').description('a usage balance (not party-scoped)').action(act(async (ctx, [id]) => {
    const r = await withAdmin(ctx, (a) => a.getUsage(id!));
    ctx.out.result(r, () => usageView(r));
  }));
  return c;
}

/** A policy file: `{id, bundle}`, or a bare bundle `{rules}` with --id. */
/**
 * The draft a policy file asks for: a draft request `{id, bundle}`, or a bundle
 * (`{rules, description}`, with its `id` beside them); --id names the policy in place
 * of the file's id (a file drafted again as a new version). The bundle goes to
 * the node as the file holds it, so that the node checks every field (a misspelt one
 * is an error there, never dropped here); a key the file cannot mean is refused.
 */
function policyFile(path: string, id: string | undefined): { id: string; bundle: unknown } {
  let doc: unknown;
  try {
    doc = parseJson(readFile(path, 'policy'));
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`The policy file ${path} is not JSON: ${(err as Error).message}.`);
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw new UsageError(`The policy file ${path} holds no object: {id, bundle}, or a bundle {rules}.`);
  const { id: fileId, ...rest } = doc as Record<string, unknown>;
  if (fileId !== undefined && typeof fileId !== 'string') throw new UsageError(`The policy file ${path} has an id that is not a string.`);
  const pid = id ?? fileId;
  let bundle: unknown;
  if ('bundle' in rest) {
    const extra = Object.keys(rest).filter((k) => k !== 'bundle');
    if (extra.length > 0) throw new UsageError(`The policy file ${path} is a draft {id, bundle}, which has no ${extra.map((k) => JSON.stringify(k)).join(', ')}: put the policy's fields in its bundle.`);
    bundle = rest.bundle;
  } else if ('rules' in rest) {
    bundle = rest;
  } else {
    throw new UsageError(`The policy file ${path} holds neither {id, bundle} nor a bundle {rules}.`);
  }
  if (pid === undefined) throw new UsageError(`The policy file ${path} names no id: give --id.`);
  return { id: pid, bundle };
}

function policies(): Command {
  const c = new Command('policy').description('the policy lifecycle: draft (author), review (reviewer), approve (approver), activate');
  c.command('draft').argument('<file>', '{id, bundle}, or a bundle {rules} with --id').option('--id <id>', 'the policy id (in place of the file\'s)')
    .description('draft a policy (the bundle is checked now)')
    .action(act<{ id?: string }>(async (ctx, [file], o) => {
      const r = await withAdmin(ctx, (a) => a.draftPolicy(policyFile(file!, o.id)));
      ctx.out.result(r, () => describePolicy(r));
    }));
  paged(c.command('list').description('the policies, a page at a time in id order, and which is active')).action(act<PageFlags>(async (ctx, _args, o) => {
    const r = await withAdmin(ctx, (a) => listing(o, 'policies', (p) => a.listPolicies(p)));
    ctx.out.result(r, () => `active: ${r.active ?? 'none'}\n${table(r.policies, [['id', 'policy'], ['state', 'state'], ['author', 'author'], ['reviewer', 'reviewer'], ['approver', 'approver'], ['activated_at_tick', 'active since tick']])}${more(r)}`);
  }));
  c.command('show').argument('<id>').description('a policy, its rules and history').action(act(async (ctx, [id]) => {
    const r = await withAdmin(ctx, (a) => a.getPolicy(id!));
    ctx.out.result(r, () => `${describePolicy(r)}\nhistory:\n${table(r.history, [['action', 'step'], ['by', 'by'], ['tick', 'tick'], ['comment', 'comment']]).replace(/^/gm, '  ')}`);
  }));
  for (const [step, run] of [
    ['review', (a: AdminClient, id: string, body: { comment?: string }) => a.reviewPolicy(id, body)],
    ['approve', (a: AdminClient, id: string, body: { comment?: string }) => a.approvePolicy(id, body)],
    ['activate', (a: AdminClient, id: string, body: { comment?: string }) => a.activatePolicy(id, body)],
  ] as const) {
    c.command(step).argument('<id>').option('--comment <text>', 'a comment kept in the policy\'s history')
      .description(`${step} a policy`)
      .action(act<{ comment?: string }>(async (ctx, [id], o) => {
        const r = await withAdmin(ctx, (a) => run(a, id!, o.comment ? { comment: o.comment } : {}));
        ctx.out.result(r, () => `${r.id} is ${r.state}`);
      }));
  }
  c.command('dry-run').argument('<id>').option('--limit <n>', `how many of the last recorded intents to judge: 1 to ${PAGE_LIMIT_MAX}`, '100')
    .option('--before <index>', 'judge the intents recorded before this log index (the --before a report ends with)')
    .description('judge the last recorded intents under this policy, read-only: which verdicts would change')
    .action(act<{ limit: string; before?: string }>(async (ctx, [id], o) => {
      const limit = /^[0-9]+$/.test(o.limit) ? Number(o.limit) : NaN;
      if (!(limit >= 1 && limit <= PAGE_LIMIT_MAX)) throw new UsageError(`--limit must be an integer from 1 to ${PAGE_LIMIT_MAX}, not "${o.limit}".`);
      const before = o.before === undefined ? undefined : /^[0-9]+$/.test(o.before) ? Number(o.before) : NaN;
      if (before !== undefined && !(before >= 1 && Number.isSafeInteger(before))) throw new UsageError(`--before must be a log index (an integer from 1), not "${o.before}".`);
      const r = await withAdmin(ctx, (a) => a.dryRunPolicy(id!, { limit, ...(before !== undefined ? { before } : {}) }));
      const older = r.next_before === null ? '' : `\nmore: older intents are judged with --before ${r.next_before}`;
      const byObligations = r.decided_by_obligations === 0 ? '' : ` (${r.decided_by_obligations} decided by obligations, not judged again)`;
      // A node of an earlier release (a rolling upgrade) sends no refused list: it judged rules alone.
      const refusedList = (r.refused as typeof r.refused | undefined) ?? [];
      const refused = refusedList.length === 0 ? '' : `\nwould be refused before judgement (422, nothing recorded):\n${table(refusedList, [['transaction', 'transaction'], ['recorded', 'recorded'], ['error', 'error'], ['message', 'message']])}`;
      ctx.out.result(r, () => `${r.policy}: ${r.evaluated} judged, ${r.unchanged} unchanged, ${r.changed.length} would change, ${r.refused === undefined ? 'refusals not judged (a node of an earlier release)' : `${refusedList.length} would be refused`}${byObligations}\n${table(r.changed, [['transaction', 'transaction'], ['recorded', 'recorded'], ['would_be', 'would be'], ['winning_rule', 'rule'], ['basis', 'basis']])}${refused}${older}`);
    }));
  return c;
}

export function adminCommand(): Command {
  const admin = new Command('admin').description('administer the ledger (admin plane): trust roots, parties, agents, accounts, usage balances, policies');
  admin.addCommand(trustRoots());
  admin.addCommand(parties());
  admin.addCommand(agents());
  admin.addCommand(accounts());
  admin.addCommand(usages());
  admin.addCommand(policies());
  admin.command('metrics').description('the node\'s Prometheus metrics').action(act(async (ctx) => {
    const text = await withAdmin(ctx, (a) => a.metrics());
    ctx.out.result({ metrics: text }, () => text.trimEnd());
  }));
  return admin;
}

export { withAdmin };
