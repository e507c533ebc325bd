/**
 * Agent commands: mint a development attestation, submit an intent (from a file or
 * from flags), and the party-scoped reads.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command, Option } from 'commander';
import { parseJson, type IntentInput, type Outcome, type Submission } from '@apl/client';
import { act } from '../context.js';
import { DEFAULT_CAPABILITIES, issuerFiles, mintAttestation } from '../dev.js';
import { EXIT, UsageError } from '../exit.js';
import { fields, table } from '../output.js';
import { listing, more, paged, type PageFlags } from '../paging.js';

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** `account:minor:currency` (or `usage:minor:currency`), minor a signed integer of any size. */
function leg(flag: string, v: string): { id: string; amount: { minor: bigint; currency: string } } {
  const m = /^([^:]+):(-?\d+):([A-Z][A-Z0-9]{2,11})$/.exec(v);
  if (!m) throw new UsageError(`${flag} ${v}: expected <id>:<minor units>:<currency>, for example acc_acme_cash:129900:USD.`);
  return { id: m[1]!, amount: { minor: BigInt(m[2]!), currency: m[3]! } };
}

function binding(v: string): [string, string | boolean] {
  const i = v.indexOf('=');
  if (i <= 0) throw new UsageError(`--binding ${v}: expected key=value, for example merchant=books-r-us.`);
  const value = v.slice(i + 1);
  return [v.slice(0, i), value === 'true' ? true : value === 'false' ? false : value];
}

interface SubmitOptions {
  file?: string;
  transaction?: string;
  policy?: string;
  agent?: string;
  action?: string;
  binding?: string[];
  debit?: string[];
  credit?: string[];
  consume?: string;
  meter?: string;
  bill?: string;
  evidence?: string[];
  justification?: string;
}

/** The intent: the file's envelope (if any), each flag given overriding its field. */
export function intentFrom(o: SubmitOptions): IntentInput {
  let base: Record<string, unknown> = {};
  if (o.file !== undefined) {
    if (!existsSync(o.file)) throw new UsageError(`There is no intent file ${o.file}.`);
    try {
      base = parseJson(readFileSync(o.file, 'utf8')) as Record<string, unknown>;
    } catch (err) {
      throw new UsageError(`The intent file ${o.file} is not JSON: ${(err as Error).message}.`);
    }
    // A file may carry a placeholder or a stale token; the configured attestation is the one used.
    delete base.attestation;
  }
  const intent = { ...base } as Record<string, unknown>;
  const set = (k: string, v: unknown) => {
    if (v !== undefined) intent[k] = v;
  };
  set('transaction', o.transaction);
  set('policy', o.policy);
  set('agent', o.agent);
  set('justification', o.justification);
  if (o.evidence) intent.evidence = o.evidence;
  if (o.action !== undefined || o.binding !== undefined) {
    const prev = (base.action ?? {}) as { action?: string; bindings?: Record<string, unknown> };
    intent.action = { action: o.action ?? prev.action, bindings: o.binding ? Object.fromEntries(o.binding.map(binding)) : (prev.bindings ?? {}) };
  }
  if (o.debit !== undefined || o.credit !== undefined) {
    intent.entries = [
      ...(o.debit ?? []).map((v) => ({ side: 'Debit', ...legOf('--debit', v) })),
      ...(o.credit ?? []).map((v) => ({ side: 'Credit', ...legOf('--credit', v) })),
    ];
  }
  for (const [flag, key] of [['consume', 'consume_usage'], ['meter', 'meter_usage'], ['bill', 'bill_usage']] as const) {
    const v = o[flag];
    if (v !== undefined) {
      const l = leg(`--${flag}`, v);
      intent[key] = { usage: l.id, amount: l.amount };
    }
  }
  intent.entries ??= [];
  if (intent.action === undefined) throw new UsageError('The intent has no action: give --action (and --binding key=value), or --file.');
  if (typeof intent.justification !== 'string') throw new UsageError('The intent has no justification: give --justification "<why>", or --file.');
  return intent as unknown as IntentInput;
}

const legOf = (flag: string, v: string) => {
  const l = leg(flag, v);
  return { account: l.id, amount: l.amount };
};

/** An outcome for people: the verdict first, then why, then what the party owes. */
export function describeOutcome(o: Outcome, s?: Pick<Submission, 'replayed' | 'attempts' | 'pins' | 'readBack'>): string {
  const p = o.provenance;
  const lines = [
    `${o.verdict}  ${o.posted ? 'posted' : 'not posted'}  ${o.transaction}`,
    fields([
      ['policy', `${o.policy} (bundle ${p.policy.bundle_hash.slice(0, 12)})`],
      ['tick', `${p.tick} (log index ${p.log_index})`],
      ['rule', p.winning_rule],
      ['basis', p.basis],
      ['authority', `${p.authority.issuer} ${p.authority.capability} (token ${p.authority.token_id})`],
      ['discharged', p.obligations_discharged.length > 0 ? p.obligations_discharged.join(', ') : undefined],
      ['created', p.obligations_created.length > 0 ? p.obligations_created.join(', ') : undefined],
      ['replayed', s?.replayed ? (s.readBack ? 'yes: read back after 503 answers' : 'yes: this transaction id was recorded before') : undefined],
      ['pin loop', s && s.attempts > 1 ? `pinned ${s.pins.join(', then ')} (${s.attempts} attempts)` : undefined],
    ]).replace(/^/gm, '  '),
  ];
  if (o.obligations_pending.length > 0) {
    // A transaction read back, or a submission answered from its record, owed this when it
    // was recorded: later receipts and breaches are not in it.
    const recorded = s === undefined || s.replayed;
    lines.push(recorded ? `owed at tick ${p.tick}, when it was recorded (apl agent obligations says what is owed now):` : 'owes:', table(o.obligations_pending, [['id', 'obligation'], ['action', 'action'], ['deadline_tick', 'due by tick'], ['state', 'state'], ['repair_of', 'repair of']]).replace(/^/gm, '  '));
  }
  return lines.join('\n');
}

/** A capability as a node accepts it (docs/decisions.md): an action name, `<name>.*`, or `*`. */
const CAPABILITY = /^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$/;

export function agentCommand(): Command {
  const agent = new Command('agent').description('act as an agent: attestations, intents, and the reads of its party');

  agent.command('attest')
    .description('mint a development attestation (PASETO v4.public) with the issuer key apl dev init made')
    .option('--issuer-key <pem>', 'the issuer\'s Ed25519 private key (default <data-dir>/issuer/issuer-key.pem)')
    .option('--iss <issuer>', 'issuer name (default: the one apl dev init registered)')
    .option('--sub <agent-uri>', 'the agent (default: the one apl dev init bound)')
    .option('--cap <list>', 'capabilities, comma-separated', DEFAULT_CAPABILITIES.join(','))
    .option('--aud <audience>', 'audience', 'agent-plane-ledger')
    .option('--ttl <seconds>', 'lifetime in seconds (a node refuses one beyond its attestation_lifetime_max_s, a day by default)', '3600')
    .option('--jti <id>', 'token id (default: random)')
    .action(act<{ issuerKey?: string; iss?: string; sub?: string; cap: string; aud: string; ttl: string; jti?: string }>(async ({ s, out, cmd }, _args, o) => {
      // --key is apl's own option, the key of a client certificate (--cert), which a
      // command that sends nothing has no use for: typed here, it was meant as the
      // issuer's, and signing with another key would mislead. (APL_KEY in the
      // environment, for the admin plane's certificate, is no such mistake.)
      if (cmd.getOptionValueSourceWithGlobals('key') === 'cli') {
        throw new UsageError('--key is the key of a client certificate (--cert), not the issuer\'s key.', 'Give the issuer\'s private key with --issuer-key <pem>.');
      }
      const f = issuerFiles(s.issuerDir);
      const profile = existsSync(f.profile) ? (JSON.parse(readFileSync(f.profile, 'utf8')) as { issuer?: string; agent?: string }) : {};
      const key = resolve(o.issuerKey ?? f.key);
      if (!existsSync(key)) throw new UsageError(`There is no issuer key at ${key}.`, 'apl dev init makes a development issuer; or give --issuer-key <pem>.');
      const issuer = o.iss ?? profile.issuer;
      const subject = o.sub ?? profile.agent;
      if (!issuer || !subject) throw new UsageError('The issuer or the agent is not known.', 'Give --iss and --sub, or run apl dev init first.');
      const ttl = Number(o.ttl);
      if (!Number.isInteger(ttl) || ttl <= 0) throw new UsageError(`--ttl ${o.ttl}: expected a positive number of seconds.`);
      const capabilities = o.cap.split(',').map((c) => c.trim()).filter(Boolean);
      const malformed = capabilities.find((c) => !CAPABILITY.test(c));
      if (malformed !== undefined) {
        throw new UsageError(`--cap ${malformed}: not an action pattern; a node would reject the attestation.`,
          'A capability is an action name (lower-case words joined by dots, as purchase.book), a name followed by .* (purchase.*), or * alone.');
      }
      const token = await mintAttestation(key, { issuer, subject, capabilities, audience: o.aud, ttlSeconds: ttl, jti: o.jti });
      out.result({ attestation: token, iss: issuer, sub: subject, cap: capabilities }, () => token);
    }));

  agent.command('submit')
    .description('submit an intent: from --file, from flags, or both (flags override the file); exits 3 when the policy refuses it')
    .option('-f, --file <intent.json>', 'an intent envelope (its attestation is replaced by the configured one)')
    .option('--transaction <id>', 'transaction id, the idempotency key (default: a fresh txn_ id)')
    .option('--policy <id>', 'the policy pin (default: the active policy)')
    .option('--agent <uri>', 'agent URI (default: the attestation\'s subject)')
    .option('--action <name>', 'the action, for example purchase.book')
    .option('--binding <key=value>', 'a binding of the action (repeatable)', collect)
    .option('--debit <acc:minor:CUR>', 'a debit leg (repeatable; replaces the file\'s legs)', collect)
    .option('--credit <acc:minor:CUR>', 'a credit leg (repeatable)', collect)
    .option('--consume <usage:minor:CUR>', 'a delta on the usage balance\'s consumed total')
    .option('--meter <usage:minor:CUR>', 'a delta on its metered total')
    .option('--bill <usage:minor:CUR>', 'a delta on its billed total')
    .option('--evidence <sha256>', 'an evidence digest (repeatable)', collect)
    .option('--justification <text>', 'why the agent acts (hashed on the ledger)')
    .action(act<SubmitOptions>(async ({ s, out }, _args, o) => {
      const intent = intentFrom(o);
      const client = s.agent();
      try {
        const r = await client.submitIntent(intent);
        out.result({ ...r.outcome, replayed: r.replayed, attempts: r.attempts, pins: r.pins, read_back: r.readBack }, () => describeOutcome(r.outcome, r));
        return r.outcome.posted ? EXIT.ok : EXIT.refused;
      } finally {
        client.close();
      }
    }));

  agent.command('tx').argument('<txn-id>').description('a transaction of the attested party and its provenance')
    .action(act(async ({ s, out }, [id]) => {
      const c = s.agent();
      try {
        const t = await c.getTransaction(id!);
        // The usage moves ride on the intent with its legs: a reader of the transaction sees both.
        const moves = (['consume', 'meter', 'bill'] as const).flatMap((move) => {
          const m = t[`${move}_usage`];
          return m === undefined ? [] : [{ move, usage: m.usage, minor: m.amount.minor, currency: m.amount.currency }];
        });
        out.result(t, () => [
          describeOutcome(t),
          'entries:',
          table(t.entries.map((e) => ({ account: e.account, side: e.side, minor: e.amount.minor, currency: e.amount.currency })), [['account', 'account'], ['side', 'side'], ['minor', 'minor units'], ['currency', 'currency']]).replace(/^/gm, '  '),
          ...(moves.length === 0 ? [] : ['usage moves:', table(moves, [['move', 'move'], ['usage', 'usage'], ['minor', 'minor units'], ['currency', 'currency']]).replace(/^/gm, '  ')]),
        ].join('\n'));
      } finally {
        c.close();
      }
    }));

  agent.command('balance').argument('<account>').description('an account of the attested party: debits, credits and net per currency')
    .action(act(async ({ s, out }, [id]) => {
      const c = s.agent();
      try {
        const b = await c.getAccountBalance(id!);
        out.result(b, () => `${b.account} (${b.party ?? 'house'})\n${table(b.balances, [['currency', 'currency'], ['debits', 'debits'], ['credits', 'credits'], ['net', 'net']])}`);
      } finally {
        c.close();
      }
    }));

  agent.command('usage').argument('<usage-id>').description('a usage balance of the attested party')
    .addOption(new Option('--format <format>', 'json (a table, or the report under --json) or text (the narration alone)').choices(['json', 'text']).default('json'))
    .action(act<{ format: string }>(async ({ s, out }, [id], o) => {
      const c = s.agent();
      try {
        if (o.format === 'text') {
          const text = await c.getUsageText(id!);
          out.result({ usage: id, text }, () => text);
          return;
        }
        const u = await c.getUsage(id!);
        out.result(u, () => `${fields([['usage', `${u.usage} (${u.currency})`], ['consumed', u.consumed], ['metered', u.metered], ['billed', u.billed], ['unmetered', u.unmetered], ['unbilled', u.unbilled], ['reconciled', u.reconciled]])}\n${u.text}`);
      } finally {
        c.close();
      }
    }));

  paged(agent.command('obligations').description('the obligations of the attested party (owed by default), a page at a time'))
    .addOption(new Option('--state <state>', 'which ones').choices(['owed', 'open', 'breached', 'discharged', 'all']).default('owed'))
    .action(act<PageFlags & { state: 'owed' | 'open' | 'breached' | 'discharged' | 'all' }>(async ({ s, out }, _args, o) => {
      if (o.state === 'owed' && (o.limit !== undefined || o.after !== undefined)) {
        throw new UsageError('--limit and --after page --state open, breached, discharged or all; what is owed (the default) is answered whole.', 'Drop them, or give --state.');
      }
      const c = s.agent();
      try {
        const l = await listing(o, 'obligations', (p) => c.listObligations({ ...p, state: o.state }));
        out.result(l, () => `${l.party} at tick ${l.tick}, ${o.state}:\n${table(l.obligations, [['id', 'obligation'], ['action', 'action'], ['state', 'state'], ['deadline_tick', 'due by tick'], ['repair_of', 'repair of'], ['discharged_by', 'discharged by']])}${more(l)}`);
      } finally {
        c.close();
      }
    }));

  agent.command('policy').description('the policy in force')
    .action(act(async ({ s, out }) => {
      const c = s.agent();
      try {
        const p = await c.getActivePolicy();
        out.result(p, () => describePolicy(p));
      } finally {
        c.close();
      }
    }));

  return agent;
}

/** A policy for people: its state, its four eyes, its rules. */
export function describePolicy(p: { id: string; state: string; bundle_hash: string; author: string; reviewer: string | null; approver: string | null; activated_at_tick: number | null; bundle: unknown }): string {
  const rules = ((p.bundle as { rules?: { id: string; modality: string; priority: number; match?: { action?: string }; basis?: string }[] })?.rules ?? []);
  return [
    fields([
      ['policy', `${p.id} (${p.state})`], ['bundle', p.bundle_hash], ['author', p.author], ['reviewer', p.reviewer], ['approver', p.approver],
      ['active since', p.activated_at_tick === null ? undefined : `tick ${p.activated_at_tick}`],
    ]),
    table(rules.map((r) => ({ ...r, action: r.match?.action })), [['id', 'rule'], ['modality', 'modality'], ['priority', 'priority'], ['action', 'action'], ['basis', 'basis']]),
  ].join('\n');
}
