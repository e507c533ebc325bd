/**
 * `npm run demo`: a narrated session with the ledger, through the SDK.
 *
 * It starts a standalone node (the real server process, on free ports of 127.0.0.1,
 * in a temporary data directory, ticking every 250 ms so that deadlines pass in
 * seconds), or uses a running one given by flags; bootstraps it through the SDK
 * with names of its own (so a node that has seen other sessions gives the same
 * verdicts); then meets every verdict, a usage move that breaks the chain, a breach
 * and its repair duty, a stale pin that the SDK's loop resolves, and ends with the
 * ledger digest and `apl log verify`. Each step checks what it was answered, so the
 * demo exits 0 only when the ledger behaved as narrated.
 *
 *   npm run demo
 *   npm run demo -- --agent-url https://127.0.0.1:8443 --admin-url https://127.0.0.1:9443 --data-dir .data/standalone
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { AgentClient, ApiError, SubstrateRejectedError, type IntentInput, type Outcome } from '@apl/client';
import { EXAMPLE_POLICY, bootstrap, ensureIssuerKey, issuerFiles, mintAttestation, policySteps, DEFAULT_CAPABILITIES, type DevPrincipals } from './dev.js';
import { Settings } from './settings.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const SERVER = resolve(HERE, '../../node/dist/main.js');
const APL = resolve(HERE, '../bin/apl.mjs');
const EVIDENCE = '3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b';
const TICK_MS = 250;

interface Node {
  agentUrl: string;
  adminUrl: string;
  dataDir: string;
  stop(): Promise<void>;
}

/** Starts the server process on free ports in `dataDir`; resolves once it has logged its addresses. */
function startNode(dataDir: string): Promise<Node> {
  const env = { ...process.env, APL_DATA_DIR: dataDir, APL_HOST: '127.0.0.1', APL_AGENT_PORT: '0', APL_ADMIN_PORT: '0', APL_TICK_INTERVAL_MS: String(TICK_MS), APL_LOG_LEVEL: 'info' };
  const child: ChildProcess = spawn(process.execPath, ['--v8-pool-size=0', SERVER], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stderr: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (l) => stderr.push(l));
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the node did not start in 20 s:\n${stderr.join('\n')}`));
    }, 20_000);
    void exited.then(() => reject(new Error(`the node exited before it started:\n${stderr.join('\n')}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.includes('"node_started"')) return;
      const m = JSON.parse(line) as { agent: string; admin: string };
      clearTimeout(timer);
      resolvePromise({
        agentUrl: m.agent, adminUrl: m.admin, dataDir,
        stop: async () => {
          child.kill('SIGTERM');
          await exited;
        },
      });
    });
  });
}

let step = 0;
const seen = new Map<string, number>();

function say(title: string, text?: string): void {
  console.log(`\n${++step}. ${title}`);
  if (text) console.log(text.replace(/^/gm, '   '));
}

/** Prints an outcome's verdict and why, and checks it is the one expected. */
function verdict(o: Outcome, expected: Outcome['verdict'], extra = ''): void {
  seen.set(o.verdict, (seen.get(o.verdict) ?? 0) + 1);
  const p = o.provenance;
  console.log(`   -> ${o.verdict}, ${o.posted ? 'posted' : 'not posted'} (${o.transaction}, tick ${p.tick}, rule ${p.winning_rule})${extra}`);
  if (p.basis) console.log(`      basis: ${p.basis}`);
  for (const ob of o.obligations_pending) {
    console.log(`      owes ${ob.id}: ${ob.action} by tick ${ob.deadline_tick} (${ob.state}${ob.repair_of ? `, repair of ${ob.repair_of}` : ''})`);
  }
  if (o.verdict !== expected) throw new Error(`expected ${expected}, the ledger answered ${o.verdict}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'agent-url': { type: 'string' }, 'admin-url': { type: 'string' }, 'data-dir': { type: 'string' }, ca: { type: 'string' }, tokens: { type: 'string' },
    },
  });
  const own = values['agent-url'] === undefined;
  const dataDir = own ? mkdtempSync(join(tmpdir(), 'apl-demo-')) : resolve(values['data-dir'] ?? '.data/standalone');
  let node: Node | null = null;
  const keys = mkdtempSync(join(tmpdir(), 'apl-demo-issuer-'));
  try {
    if (own) {
      node = await startNode(dataDir);
      console.log(`A standalone node is up: agent plane ${node.agentUrl}, admin plane ${node.adminUrl}, ticking every ${TICK_MS} ms (data in ${dataDir}).`);
    } else {
      console.log(`Using the node at ${values['agent-url']} (admin plane ${values['admin-url']}).`);
    }
    const s = new Settings({
      dataDir, agentUrl: node?.agentUrl ?? values['agent-url']!, adminUrl: node?.adminUrl ?? values['admin-url'] ?? 'https://127.0.0.1:9443', as: 'dev-author',
      ...(values.ca ? { ca: values.ca } : {}), ...(values.tokens ? { tokens: values.tokens } : {}),
    });
    await scenario(s, keys);
  } finally {
    await node?.stop();
    rmSync(keys, { recursive: true, force: true });
    if (own) rmSync(dataDir, { recursive: true, force: true });
  }
}

async function scenario(s: Settings, keysDir: string): Promise<void> {
  const run = randomBytes(3).toString('hex');
  const names = {
    issuer: `demo-issuer-${run}`, party: `party_demo_${run}`, agent: `agent://demo.example/agent/buyer-${run}`,
    cash: `acc_demo_${run}_cash`, books: `acc_demo_${run}_books`, usage: `usage_demo_${run}_llm`,
    policyA: `pol_demo_${run}_a`, policyB: `pol_demo_${run}_b`,
  };
  const principals = { operator: 'dev-author', author: 'dev-author', reviewer: 'dev-reviewer', approver: 'dev-approver' };
  const admins: DevPrincipals = { operator: s.admin('dev-author'), author: s.admin('dev-author'), reviewer: s.admin('dev-reviewer'), approver: s.admin('dev-approver') };
  const files = issuerFiles(keysDir);
  const key = ensureIssuerKey(files);
  let agent: AgentClient | null = null;
  try {
    say('Bootstrap through the SDK: trust root, party, agent, accounts, a usage balance, and the example policy through four eyes.');
    const made = await bootstrap(admins, principals, {
      issuer: names.issuer, party: names.party, agent: names.agent,
      accounts: [{ id: names.cash, party: names.party }, { id: names.books }],
      usages: [{ id: names.usage, currency: 'USD', owner: names.party }],
      policy: { id: names.policyA, bundle: EXAMPLE_POLICY.bundle },
    }, key);
    for (const m of made) console.log(`   ${m.what.padEnd(18)} ${m.id} (${m.status}, by ${m.by})`);

    const attestation = await mintAttestation(files.key, { issuer: names.issuer, subject: names.agent, capabilities: DEFAULT_CAPABILITIES, audience: 'agent-plane-ledger', ttlSeconds: 3600 });
    agent = s.agent(attestation);
    const purchase = (minor: bigint, over: Partial<IntentInput> = {}): IntentInput => ({
      entries: [
        { account: names.cash, side: 'Debit', amount: { minor, currency: 'USD' } },
        { account: names.books, side: 'Credit', amount: { minor, currency: 'USD' } },
      ],
      action: { action: 'purchase.book', bindings: { merchant: 'books-r-us' } },
      evidence: [EVIDENCE],
      justification: 'Buying the reference book the user asked for',
      ...over,
    });

    say('A purchase of 7,000.00 USD: the policy forbids purchases above 5,000.00 USD. The refusal is recorded and answered 200.');
    verdict((await agent.submitIntent(purchase(700000n))).outcome, 'ForbiddenRejected');

    say('A receipt that names no obligation: no permission covers receipt.attach, so default deny.');
    verdict((await agent.submitIntent({ entries: [], action: { action: 'receipt.attach', bindings: {} }, evidence: [EVIDENCE], justification: 'A receipt for nothing in particular' })).outcome, 'NotPermittedRejected');

    say('A purchase of 1,299.00 USD that also consumes 18446744073709551621 (beyond 2^64) of the usage balance: permitted, and a receipt is now owed within 5 ticks.');
    const first = (await agent.submitIntent(purchase(129900n, { consume_usage: { usage: names.usage, amount: { minor: 18446744073709551621n, currency: 'USD' } } }))).outcome;
    verdict(first, 'Permitted');
    const receipt = first.provenance.obligations_created[0];
    if (receipt === undefined) throw new Error('the permitted purchase created no obligation');

    say('A purchase that meters more than was consumed: the usage chain 0 <= billed <= metered <= consumed would break, so the whole intent is refused (422), legs included, and nothing is recorded.');
    try {
      await agent.submitIntent(purchase(100n, { meter_usage: { usage: names.usage, amount: { minor: 18446744073709551622n, currency: 'USD' } } }));
      throw new Error('the chain-breaking move was accepted');
    } catch (err) {
      if (!(err instanceof SubstrateRejectedError)) throw err;
      console.log(`   -> ${err.status} ${err.code} (${err.body.kind}): ${err.message}`);
    }
    console.log(`   ${await agent.getUsageText(names.usage)}`);

    say(`A receipt for ${receipt} with no evidence: the obligation asks for at least one evidence digest.`);
    verdict((await agent.submitIntent({ entries: [], action: { action: 'receipt.attach', bindings: { obligation: receipt } }, evidence: [], justification: 'Receipt to follow' })).outcome, 'ObligationUnmetRejected');

    say('No receipt comes. The ledger ticks; when the deadline passes, the obligation is breached and a refund duty is created.');
    const duty = await breach(agent, receipt);
    console.log(`   -> ${receipt} breached at tick ${duty.breachedAt}; repair duty ${duty.id} (${duty.action}) blocks ${duty.blocks.join(', ')} until tick ${duty.deadline}`);

    say('Another purchase while the refund is owed.');
    verdict((await agent.submitIntent(purchase(2500n))).outcome, 'RepairOutstandingRejected');

    say('The refund, naming the repair duty: it reverses the 1,299.00 USD and discharges the duty.');
    const refund = (await agent.submitIntent({
      entries: [
        { account: names.books, side: 'Debit', amount: { minor: 129900n, currency: 'USD' } },
        { account: names.cash, side: 'Credit', amount: { minor: 129900n, currency: 'USD' } },
      ],
      action: { action: 'purchase.refund', bindings: { obligation: duty.id } }, evidence: [EVIDENCE], justification: 'Refunding the purchase whose receipt never came',
    })).outcome;
    verdict(refund, 'Permitted', `, discharged ${refund.provenance.obligations_discharged.join(', ')}`);

    say('The same purchase again: permitted now. Its receipt is attached at once, with evidence, and discharges it.');
    const again = (await agent.submitIntent(purchase(2500n))).outcome;
    verdict(again, 'Permitted');
    const attached = (await agent.submitIntent({ entries: [], action: { action: 'receipt.attach', bindings: { obligation: again.provenance.obligations_created[0]! } }, evidence: [EVIDENCE], justification: 'The receipt' })).outcome;
    verdict(attached, 'Permitted', `, discharged ${attached.provenance.obligations_discharged.join(', ')}`);

    say(`A new policy ${names.policyB} is drafted, reviewed, approved and activated; the agent still pins ${names.policyA}.`);
    await policySteps(admins, principals, { id: names.policyB, bundle: EXAMPLE_POLICY.bundle });
    const stale = await agent.submitIntent(purchase(4200n, { policy: names.policyA }));
    console.log(`   the SDK was answered 409 stale_policy, re-read the active policy and resubmitted the same transaction: pinned ${stale.pins.join(', then ')} in ${stale.attempts} attempts`);
    verdict(stale.outcome, 'Permitted');
    if (stale.attempts !== 2 || stale.pins[0] !== names.policyA || stale.pins[1] !== names.policyB) throw new Error(`the pin loop went ${stale.pins.join(', ')}`);

    say('The ledger digest, and the log verified line by line against it (apl log verify).');
    const d = await admins.operator.getDigest();
    console.log(`   applied index ${d.applied_index}, tick ${d.tick}\n   digest      ${d.digest}\n   state hash  ${d.state_hash}`);
    await aplLogVerify(s);

    const order = ['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected'];
    console.log(`\nVerdicts met: ${order.filter((v) => seen.has(v)).map((v) => `${v} (${seen.get(v)})`).join(', ')}.`);
    console.log('Also met: 422 substrate_rejected (the usage chain), 409 stale_policy (resolved by the SDK\'s pin loop), a breach and its repair duty.');
  } finally {
    agent?.close();
    for (const a of Object.values(admins)) a.close();
  }
}

/** Waits, a tick at a time, until the obligation is breached; returns its repair duty. */
async function breach(agent: AgentClient, obligation: string): Promise<{ id: string; action: string; blocks: string[]; deadline: number; breachedAt: number }> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const all = await agent.listObligations({ state: 'all' });
    const original = all.obligations.find((o) => o.id === obligation);
    const duty = all.obligations.find((o) => o.repair_of === obligation);
    if (original?.breached_at_tick != null && duty) {
      console.log(`   ... tick ${all.tick}`);
      return { id: duty.id, action: duty.action, blocks: duty.blocks, deadline: duty.deadline_tick, breachedAt: original.breached_at_tick };
    }
    await new Promise((r) => setTimeout(r, TICK_MS));
  }
  throw new Error(`${obligation} was not breached within 30 s: is the node ticking?`);
}

/** Runs the real `apl log verify` against the node, printing its output. */
async function aplLogVerify(s: Settings): Promise<void> {
  const env = { ...process.env, APL_ADMIN_URL: s.urls('admin').join(','), APL_DATA_DIR: s.dataDir, ...(s.caFile ? { APL_CA: s.caFile } : {}), APL_ADMIN_TOKENS_FILE: s.tokensFile };
  const child = spawn(process.execPath, [APL, 'log', 'verify'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (l) => lines.push(l));
  createInterface({ input: child.stderr! }).on('line', (l) => lines.push(l));
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  console.log(`   $ apl log verify\n${lines.map((l) => `   ${l}`).join('\n')}`);
  if (code !== 0) throw new Error(`apl log verify exited ${code}`);
}

// paseto signs with Web Crypto's Ed25519, whose getPublicKey Node.js 24 still calls
// experimental; that note is not part of the story.
const printers = process.listeners('warning');
process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.name !== 'ExperimentalWarning') for (const p of printers) p(w);
});

main().catch((err: unknown) => {
  const e = err as Error;
  console.error(`\ndemo failed: ${err instanceof ApiError ? `${err.status} ${err.code}: ${err.message}` : (e.stack ?? String(err))}`);
  process.exitCode = 1;
});
