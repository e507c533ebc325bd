// Runs the data-driven scenarios of the normative law (testdata/scenarios/*.txt):
// each file holds a policy, a sequence of intents, ticks and lifecycle steps, and
// the verdicts, obligations and provenance they must produce. REWRITE=1 writes the
// actual outputs back into the files for review. See testdata/scenarios/README.md.
import t from 'tap';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { dryRun } from '../dryrun.js';
import type { Applied } from '../apply.js';
import { pendingFor } from '../obligations.js';
import type { Principal, Role } from '../ops.js';
import { parseJson } from '../json.js';
import { AGENT_A, AGENT_B, Harness, ISSUER, KEY_ID, OPERATOR, PARTY_A, PARTY_B, PUBLIC_KEY } from '../testing.js';
import type { Outcome, Policy } from '../state.js';
import { TABLES } from '../store.js';
import { readDirectives, rewrite, type Directive } from './datadriven.js';

const DIR = new URL('../../testdata/scenarios/', import.meta.url).pathname;
const AGENTS: Record<string, { agent: string; party: string; suffix: string }> = {
  a: { agent: AGENT_A, party: PARTY_A, suffix: 'a' },
  b: { agent: AGENT_B, party: PARTY_B, suffix: 'b' },
};
/** A digest for evidence items: the n-th is 64 hex digits of n. */
const digest = (n: number) => n.toString(16).padStart(64, '0');

function bootstrap(): Harness {
  const h = new Harness();
  h.ok({ type: 'AddTrustRoot', v: 1, by: OPERATOR, issuer: ISSUER, public_key: PUBLIC_KEY, key_id: KEY_ID });
  for (const { agent, party, suffix } of Object.values(AGENTS)) {
    h.ok({ type: 'AddParty', v: 1, by: OPERATOR, id: party });
    h.ok({ type: 'BindAgent', v: 1, by: OPERATOR, agent, party });
    h.ok({ type: 'OpenAccount', v: 1, by: OPERATOR, id: `acc_cash_${suffix}`, party });
    h.ok({ type: 'OpenAccount', v: 1, by: OPERATOR, id: `acc_books_${suffix}`, party });
    h.ok({ type: 'OpenUsage', v: 1, by: OPERATOR, id: `usage_llm_${suffix}`, currency: 'USD', owner: party });
  }
  return h;
}

function principal(d: Directive, role: Role): Principal {
  const roles = d.args.get('roles');
  return { name: d.args.get('by') ?? role, roles: roles === undefined ? [role] : (roles.split(',').filter(Boolean) as Role[]) };
}

/** `100:USD,5:EUR` as balanced cash -> books legs of the agent's party. */
function legs(spec: string | undefined, suffix: string, from?: string, to?: string) {
  if (!spec) return [];
  return spec.split(',').flatMap((part) => {
    const [minor, currency = 'USD'] = part.split(':');
    const amount = { minor: BigInt(minor!), currency };
    return [
      { account: from ?? `acc_cash_${suffix}`, side: 'Debit', amount },
      { account: to ?? `acc_books_${suffix}`, side: 'Credit', amount },
    ];
  });
}

function move(spec: string | undefined, suffix: string) {
  if (!spec) return undefined;
  const [minor, currency = 'USD', usage = `usage_llm_${suffix}`] = spec.split(':');
  return { usage, amount: { minor: BigInt(minor!), currency } };
}

function bindings(spec: string | undefined): Record<string, unknown> {
  if (!spec) return {};
  return Object.fromEntries(spec.split(',').map((kv) => {
    const [k, v = ''] = kv.split(':');
    return [k, /^-?\d+$/.test(v) ? BigInt(v) : v === 'true' || v === 'false' ? v === 'true' : v];
  }));
}

function intentOp(d: Directive, policy: string) {
  const who = AGENTS[d.args.get('agent') ?? 'a']!;
  const a = d.args;
  const moves = Object.fromEntries(
    (['consume', 'meter', 'bill'] as const).map((k) => [`${k}_usage`, move(a.get(k), who.suffix)]).filter(([, v]) => v),
  );
  return {
    type: 'SubmitIntent', v: 1,
    transaction: a.get('txn') ?? 'txn_x',
    agent: who.agent,
    entries: legs(a.get('legs'), who.suffix, a.get('from'), a.get('to')),
    ...moves,
    action: { action: a.get('action') ?? 'purchase.book', bindings: bindings(a.get('bind')) },
    evidence: Array.from({ length: Number(a.get('evidence') ?? 0) }, (_, i) => digest(i + 1)),
    justification_hash: 'f'.repeat(64),
    policy: a.get('pin') ?? policy,
    authority: { issuer: ISSUER, key_id: KEY_ID, token_id: a.get('token') ?? 'tok', capabilities: (a.get('caps') ?? '*').split(',') },
  };
}

const list = (xs: readonly string[]) => `[${xs.join(' ')}]`;

function showIntent(a: Applied, h: Harness, party: string): string {
  if (!a.result.ok) return `error ${a.result.error.error}: ${a.result.error.message}`;
  const v = a.result.value as { kind: string; outcome?: Outcome; transaction?: string };
  if (v.kind === 'replayed') return `replayed ${v.transaction}: ${h.txn(v.transaction!, party)!.outcome.verdict}`;
  const o = v.outcome!;
  const p = o.provenance;
  const lines = [
    `${o.verdict} posted=${o.posted} rule=${p.winning_rule} tick=${p.tick}`,
    `checked=${list(p.prohibitions_checked)} discharged=${list(p.obligations_discharged)} created=${list(p.obligations_created)}`,
  ];
  if (p.basis !== undefined) lines.push(`basis: ${p.basis}`);
  lines.push(...pendingLines(o.obligations_pending));
  return lines.join('\n');
}

function pendingLines(pending: Outcome['obligations_pending']): string[] {
  return pending.map((o) => `owes ${o.id} ${o.action} due=${o.deadline_tick} ${o.state}${o.repair_of ? ` repair_of=${o.repair_of}` : ''}`);
}

function showAdmin(a: Applied): string {
  if (!a.result.ok) return `error ${a.result.error.error}: ${a.result.error.message}`;
  const v = a.result.value as { id: string; state: string; bundle_hash: string; activated_at_tick: number | null };
  return `${v.id} ${v.state}${v.state === 'active' ? ` at tick ${v.activated_at_tick}` : ''}`;
}

/** The full provenance of a recorded transaction, every field of it but the entry hash. */
function showProvenance(h: Harness, txn: string, party: string): string {
  const r = h.txn(txn, party);
  if (!r) return `no transaction ${txn}`;
  const p = r.outcome.provenance;
  return [
    `${r.outcome.verdict} posted=${r.outcome.posted} tick=${p.tick} log_index=${p.log_index}`,
    `authority issuer=${p.authority.issuer} token=${p.authority.token_id} capability=${p.authority.capability}`,
    `winning_rule=${p.winning_rule} checked=${list(p.prohibitions_checked)}`,
    `discharged=${list(p.obligations_discharged)} created=${list(p.obligations_created)}`,
    `policy ${p.policy.id} ${p.policy.bundle_hash}`,
    ...(p.basis === undefined ? [] : [`basis: ${p.basis}`]),
  ].join('\n');
}

function showPolicies(h: Harness): string {
  return h.store.values<Policy>(TABLES.policy.prefix).map((p) => [
    `${p.id} ${p.state} author=${p.author} reviewer=${p.reviewer ?? '-'} approver=${p.approver ?? '-'}`,
    `activated=${p.activated_at_tick ?? '-'} superseded=${p.superseded_at_tick ?? '-'}`,
    `history=${list(p.history.map((e) => `${e.action}:${e.by}@${e.tick}`))}`,
  ].join(' ')).join('\n') || 'none';
}

/** Debit and credit totals of the agent's two accounts, per currency. */
function showBalances(h: Harness, suffix: string): string {
  return [`acc_cash_${suffix}`, `acc_books_${suffix}`].flatMap((id) => {
    const a = h.state.accounts.get(id)!;
    return [...a.totals].map(([cur, t]) => `${id} ${cur} debits=${t.debits} credits=${t.credits}`);
  }).join('\n') || 'none';
}

function run(h: Harness, d: Directive, ctx: { policy: string }): string {
  const id = d.args.get('id') ?? ctx.policy;
  switch (d.command) {
    case 'policy': {
      const bundle = parseJson(d.input);
      const steps: [string, Principal][] = [
        ['DraftPolicy', { name: 'alice', roles: ['author'] }],
        ['ReviewPolicy', { name: 'bob', roles: ['reviewer'] }],
        ['ApprovePolicy', { name: 'carol', roles: ['approver'] }],
        ['ActivatePolicy', { name: 'carol', roles: ['approver'] }],
      ];
      for (const [type, by] of steps) {
        const a = h.admin(type, type === 'DraftPolicy' ? { id, bundle } : { id }, by);
        if (!a.result.ok) return showAdmin(a);
      }
      ctx.policy = id;
      return `${id} active at tick ${h.state.tick}`;
    }
    case 'draft': {
      const a = h.admin('DraftPolicy', { id, bundle: parseJson(d.input) }, principal(d, 'author'));
      if (!a.result.ok && Array.isArray(a.result.error.issues)) {
        return [`error ${a.result.error.error}`, ...(a.result.error.issues as { path: string; message: string }[]).map((i) => `${i.path}: ${i.message}`)].join('\n');
      }
      return showAdmin(a);
    }
    case 'review':
      return showAdmin(h.admin('ReviewPolicy', { id }, principal(d, 'reviewer')));
    case 'approve':
      return showAdmin(h.admin('ApprovePolicy', { id }, principal(d, 'approver')));
    case 'activate': {
      const a = h.admin('ActivatePolicy', { id }, principal(d, 'approver'));
      if (a.result.ok) ctx.policy = id;
      return showAdmin(a);
    }
    case 'intent':
      return showIntent(h.run(intentOp(d, ctx.policy)), h, AGENTS[d.args.get('agent') ?? 'a']!.party);
    case 'tick': {
      const out: string[] = [];
      for (const a of h.tick(Number(d.args.get('n') ?? 1))) {
        const v = a.result.ok ? (a.result.value as { tick: number; breaches: { obligation: string; repairs_created: string[] }[] }) : null;
        for (const b of v?.breaches ?? []) out.push(`tick ${v!.tick}: breached ${b.obligation} repairs=${list(b.repairs_created)}`);
      }
      out.push(`tick ${h.state.tick}`);
      return out.join('\n');
    }
    case 'provenance':
      return showProvenance(h, d.args.get('txn') ?? 'txn_x', AGENTS[d.args.get('agent') ?? 'a']!.party);
    case 'policies':
      return showPolicies(h);
    case 'balances':
      return showBalances(h, AGENTS[d.args.get('agent') ?? 'a']!.suffix);
    case 'obligations':
      return pendingLines(pendingFor(h.state, AGENTS[d.args.get('agent') ?? 'a']!.party)).join('\n') || 'none';
    case 'dry-run': {
      const r = dryRun(h.recorded(Number(d.args.get('limit') ?? 100)), parseJson(d.input));
      if (!r.ok) return `error ${r.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`;
      const { evaluated, unchanged, decided_by_obligations, changed } = r.report;
      return [`evaluated=${evaluated} unchanged=${unchanged} decided_by_obligations=${decided_by_obligations}`,
        ...changed.map((c) => `${c.transaction}: ${c.recorded} -> ${c.would_be} rule=${c.winning_rule}`)].join('\n');
    }
    default:
      throw new Error(`line ${d.line}: unknown command ${d.command}`);
  }
}

const files = readdirSync(DIR).filter((f) => f.endsWith('.txt')).sort();
t.ok(files.length > 0, 'there are scenarios');
for (const file of files) {
  t.test(file.replace(/\.txt$/, ''), async (t) => {
    const path = join(DIR, file);
    const parsed = readDirectives(path);
    const h = bootstrap();
    const ctx = { policy: 'pol_1' };
    const actual = parsed.directives.map((d) => run(h, d, ctx));
    if (process.env.REWRITE === '1') rewrite(path, parsed, actual);
    parsed.directives.forEach((d, k) => t.equal(actual[k], d.expected, `${file}:${d.line} ${d.head[0]}`));
  });
}
