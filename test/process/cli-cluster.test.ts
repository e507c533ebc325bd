// Proves, with real server processes: a node says it is standalone only in a group of
// one, and a member of three names its cluster; `apl dev init` against a cluster
// prints Next commands that carry every replica's agent plane, and they work pasted
// into a shell with none of apl's settings; `apl cluster status --json` names the
// primary, so that a script can stop the primary rather than a member it guessed.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseJson } from '@apl/client';
import { EXIT } from '@apl/cli';
import { run, runApl, withoutApl } from '../support/apl.js';
import { startCluster, type Cluster } from '../support/cluster.js';
import { PRINCIPALS, testCerts } from '../support/node.js';
import { REPO, nodeEnv, spawnNode, type NodeProcess } from '../support/process.js';

t.setTimeout(180_000);

const dir = mkdtempSync(join(tmpdir(), 'apl-cli-cluster-'));
/** The development principals, as `npm run cluster:prepare` makes them. */
const DEV = { 'dev-author': ['author', 'operator'], 'dev-reviewer': ['reviewer'], 'dev-approver': ['approver'] } as const;
const tokens = Object.fromEntries(Object.entries(DEV).map(([name, roles]) => [name, { token: randomBytes(18).toString('base64url'), roles }]));
let cluster: Cluster;

t.before(async () => {
  writeFileSync(join(dir, 'admin-tokens.json'), JSON.stringify(tokens));
  const principals = Object.entries(tokens).map(([name, { token, roles }]) => ({ name, roles, token_sha256: createHash('sha256').update(token).digest('hex') }));
  cluster = await startCluster({ env: { APL_ADMIN_PRINCIPALS: JSON.stringify([...PRINCIPALS, ...principals]) } });
  await cluster.leader(15_000);
});
t.teardown(async () => {
  await cluster?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** apl against every replica of the cluster, as the README's cluster section sets it up. */
const apl = (args: string[]) => runApl(args, {
  APL_DATA_DIR: dir, APL_CA: testCerts().ca,
  APL_AGENT_URL: cluster.members.map((m) => m.agent_url).join(','), APL_ADMIN_URL: cluster.members.map((m) => m.admin_url).join(','),
});

/** The line a node prints when it is up, once it has printed it. */
async function upLine(p: NodeProcess): Promise<string> {
  for (let waited = 0; waited < 10_000; waited += 50) {
    const line = /agent-plane ledger: node \S+ is up \([^\n]*\)\./.exec(p.output());
    if (line) return line[0];
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the node did not say it is up\n${p.output()}`);
}

t.test('a member of three says which cluster it is in; a node alone says standalone', async (t) => {
  for (const id of ['n1', 'n2', 'n3']) {
    t.equal(await upLine(cluster.process(id)!), `agent-plane ledger: node ${id} is up (cluster of 3: n1, n2, n3).`);
  }
  const alone = mkdtempSync(join(tmpdir(), 'apl-cli-alone-'));
  const p = await spawnNode(nodeEnv(alone));
  t.teardown(async () => {
    await p.stop();
    rmSync(alone, { recursive: true, force: true });
  });
  t.equal(await upLine(p), 'agent-plane ledger: node n1 is up (standalone).');
});

t.test('dev init in a cluster prints Next commands that work pasted into a bare shell', async (t) => {
  const r = await apl(['--json', 'dev', 'init']);
  t.equal(r.code, EXIT.ok, r.stderr);
  const next = (parseJson(r.stdout) as { next: string[] }).next;
  const agents = cluster.members.map((m) => m.agent_url).join(',');
  t.equal(next[1], `npx apl --agent-url ${agents} --data-dir ${dir} --ca ${testCerts().ca} agent submit --file docs/examples/intent.json`);
  const pasted = await run('bash', ['-c', `set -e\n${next.join('\n')}`], { ...withoutApl(), PATH: `${join(REPO, 'node_modules/.bin')}:${process.env.PATH}` });
  t.equal(pasted.code, 0, pasted.stderr);
  t.match(pasted.stdout, /^Permitted  posted  txn_01JD7Y3K\n/);
  const human = await apl(['dev', 'init']);
  t.equal(human.code, EXIT.ok, human.stderr);
  t.match(human.stdout, new RegExp(`^cluster at ${cluster.members.map((m) => m.admin_url).join(', ').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is bootstrapped:\n`), 'the cluster, not a node, is bootstrapped');
});

t.test('cluster status names the primary, its voters, learners and peers, for people and for scripts', async (t) => {
  const leader = await cluster.leader();
  const status = await apl(['--json', 'cluster', 'status']);
  t.equal(status.code, EXIT.ok, status.stderr);
  t.match(parseJson(status.stdout), { leader, voters: ['n1', 'n2', 'n3'], learners: [] });
  // Asked at a follower first, apl shows the primary's view, the only one with each member's lag.
  const followerFirst = [...cluster.members].sort((a, b) => Number(a.id === leader) - Number(b.id === leader)).map((m) => m.admin_url).join(',');
  const viewed = await runApl(['--json', 'cluster', 'status'], { APL_DATA_DIR: dir, APL_CA: testCerts().ca, APL_ADMIN_URL: followerFirst });
  t.match(parseJson(viewed.stdout), { node: leader, role: 'leader' }, 'the primary\'s view');
  t.ok((parseJson(viewed.stdout) as { members: { lag: unknown }[] }).members.every((m) => typeof m.lag === 'number'), 'with every member\'s lag');
  const human = await apl(['cluster', 'status']);
  t.match(human.stdout, new RegExp(`^node +${leader} \\(leader\\)\\nleader +${leader}\\nterm +\\d+\\ncommit index +\\d+\\napplied index +\\d+\\nvoters +n1, n2, n3\\nlearners +none\\nremoved +none\\nmember +role +agent plane +peer +match index +lag +contact\\nn1 `));
  t.notMatch(human.stdout, /only the primary knows/, 'the primary\'s view needs no pointer to it');
  // Asked at followers alone, apl says that the lag is the primary's to know, and where to ask.
  const followers = cluster.members.filter((m) => m.id !== leader);
  const atFollowers = await runApl(['cluster', 'status'], { APL_DATA_DIR: dir, APL_CA: testCerts().ca, APL_ADMIN_URL: followers.map((m) => m.admin_url).join(',') });
  t.equal(atFollowers.code, EXIT.ok, atFollowers.stderr);
  const primaryAt = cluster.members.find((m) => m.id === leader)!.admin_url;
  t.match(atFollowers.stdout, `\nonly the primary knows each member's match index, lag and contact, and none of the admin addresses given is the primary's; ask it: apl --admin-url ${primaryAt} cluster status\n`);
});

t.test('cluster status at the primary shows a member that stopped answering as unreachable', async (t) => {
  const leader = await cluster.leader();
  const down = ['n1', 'n2', 'n3'].find((id) => id !== leader)!;
  const atPrimary = (json: boolean) => runApl([...(json ? ['--json'] : []), 'cluster', 'status'], {
    APL_DATA_DIR: dir, APL_CA: testCerts().ca, APL_ADMIN_URL: cluster.members.find((m) => m.id === leader)!.admin_url,
  });
  const reachable = async () => Object.fromEntries((parseJson((await atPrimary(true)).stdout) as { members: { id: string; reachable: boolean | null }[] }).members.map((m) => [m.id, m.reachable]));
  // A primary learns that a member answers from its next heartbeat's reply: just after an
  // election it has heard from none yet.
  let before = await reachable();
  for (let i = 0; i < 20 && !Object.values(before).every((r) => r === true); i++) {
    await new Promise((r) => setTimeout(r, 100));
    before = await reachable();
  }
  t.same(before, { n1: true, n2: true, n3: true }, 'every member answers');
  await cluster.kill(down);
  let seen = await reachable();
  for (let waited = 0; seen[down] !== false && waited < 10_000; waited += 200) {
    await new Promise((r) => setTimeout(r, 200));
    seen = await reachable();
  }
  t.equal(seen[down], false, `${down}, killed, is unreachable within an election timeout or two`);
  t.equal(seen[leader], true);
  t.match((await atPrimary(false)).stdout, new RegExp(`\\n${down} +follower .* unreachable\\n?`), 'and the table says so');
});
