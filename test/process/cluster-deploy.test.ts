// Proves the deployment files agree with each other, since no container engine runs
// here to try them: docker-compose.yml mounts each node's config from deploy/, the
// certificates and tokens where the configs look for them, and a data volume where
// the config keeps its data, and publishes the ports the configs listen on and
// advertise; the member lists agree. Then `npm run cluster` runs the same configs as
// local processes (on free ports, in a scratch directory), a primary is elected, and
// `npm run cluster:stop` stops them all; it signals only processes that are its
// members, and a first start that fails part-way stops what it started. Every way to start a node passes
// --v8-pool-size=0, and a node so started has one V8 helper fewer than the CPUs. And
// an admin plane that requires client certificates refuses a caller without one.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { ConfigSchema } from '@apl/node';
import { NODE_FLAGS, REPO, nodeEnv, spawnNode } from '../support/process.js';
import { TOKENS, startTestNode, testCerts } from '../support/node.js';
import { runApl } from '../support/apl.js';

t.setTimeout(180_000);

const IDS = ['n1', 'n2', 'n3'];
const SPARES = ['n4', 'n5'];
const compose = parse(readFileSync(join(REPO, 'docker-compose.yml'), 'utf8')) as { services: Record<string, { hostname?: string; ports?: string[]; volumes?: string[]; profiles?: string[] }> };
const configs = Object.fromEntries([...IDS, ...SPARES].map((id) => [id, ConfigSchema.parse(JSON.parse(readFileSync(join(REPO, 'deploy', `${id}.json`), 'utf8')))]));
const dockerfile = readFileSync(join(REPO, 'deploy', 'Dockerfile'), 'utf8');
const SCRIPT = join(REPO, 'scripts', 'cluster.mjs');

t.test('docker-compose.yml and deploy/ agree', async (t) => {
  t.same(Object.keys(compose.services).sort(), [...IDS, ...SPARES], 'one service per config');
  t.match(dockerfile, /CMD \["--config", "\/etc\/apl\/config.json"\]/, 'the image reads /etc/apl/config.json');
  for (const id of [...IDS, ...SPARES]) {
    const c = configs[id]!;
    const s = compose.services[id]!;
    const mounts = Object.fromEntries((s.volumes ?? []).map((v) => {
      const [from, to] = v.split(':');
      return [to!, from!];
    }));
    t.equal(c.node_id, id, `${id}: the config is the service's`);
    t.equal(s.hostname ?? id, id, `${id}: the host name is the node id its certificate names`);
    t.equal(mounts['/etc/apl/config.json'], `./deploy/${id}.json`, `${id}: its config is mounted`);
    t.equal(mounts[c.data_dir], `${id}-data`, `${id}: its data is a volume of its own`);
    for (const file of [c.tls.ca!, c.tls.cert!, c.tls.key!]) {
      t.equal(mounts[file], `./.data/cluster/certs/${basename(file)}`, `${id}: ${file} is mounted`);
    }
    t.notOk(Object.values(mounts).some((from) => /ca-key\.pem$|\/certs$/.test(from)), `${id}: the CA's key is not mounted`);
    t.match(c.tls.cert!, new RegExp(`/${id}\\.pem$`), `${id}: its own certificate`);
    t.equal(mounts[c.admin_tokens_file!], './.data/cluster/admin-tokens.json', `${id}: the tokens are mounted where the config reads them`);
    t.equal(c.host, '0.0.0.0', `${id}: listens on every interface of its container`);
    const published = new Set(s.ports ?? []);
    t.ok(published.has(`127.0.0.1:${c.agent_port}:${c.agent_port}`) && published.has(`127.0.0.1:${c.admin_port}:${c.admin_port}`), `${id}: publishes its agent and admin ports, on the host's loopback`);
    t.equal(published.size, 2, `${id}: and nothing else`);
    const self = c.members.find((m) => m.id === id)!;
    t.equal(Number(new URL(self.agent_url).port), c.agent_port, `${id}: advertises the agent port it publishes`);
    t.equal(Number(new URL(self.admin_url!).port), c.admin_port, `${id}: and the admin port`);
    if (SPARES.includes(id)) {
      t.same(s.profiles, ['spare'], `${id}: a spare, started only by name`);
      t.equal(c.cluster_state, 'join', `${id}: joins a running cluster`);
      t.same(c.members, [...configs.n1!.members, self], `${id}: knows the bootstrap members and itself`);
    } else {
      t.equal(s.profiles, undefined, `${id}: started by docker compose up`);
      t.same(c.members, configs.n1!.members, `${id}: the same member list`);
    }
    t.equal(c.cluster_id, configs.n1!.cluster_id, `${id}: the same cluster id`);
  }
  for (const m of [...configs.n1!.members, ...SPARES.map((id) => configs[id]!.members.at(-1)!)]) {
    const [host, port] = m.peer_addr.split(':');
    t.equal(host, m.id, `${m.id} is reached by its service name`);
    t.equal(Number(port), configs[m.id]!.peer_port, `${m.id} is reached on the peer port it listens on`);
  }
});

/**
 * A port offset that leaves all the configs' ports free on 127.0.0.1, and below the
 * kernel's ephemeral range (32768 and up) so no outgoing connection takes one first.
 */
async function freeOffset(): Promise<number> {
  const ports = [...IDS, ...SPARES].flatMap((id) => [configs[id]!.agent_port, configs[id]!.admin_port, configs[id]!.peer_port]);
  const room = 32_767 - Math.max(...ports) - 10_000;
  for (let attempt = 0; attempt < 50; attempt++) {
    const offset = 10_000 + Math.floor(Math.random() * room);
    if ((await Promise.all(ports.map((p) => isFree(p + offset)))).every(Boolean)) return offset;
  }
  throw new Error('no free port offset');
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

t.test('npm run cluster runs the configs as local processes; cluster:stop stops them', async (t) => {
  const dir = scratch(t, 'apl-cluster-script-');
  const offset = await freeOffset();
  const args = ['--dir', dir, '--port-offset', String(offset)];
  t.teardown(() => spawnSync(process.execPath, [SCRIPT, 'stop', ...args]));
  // No command is start: `npm run cluster` is the script alone, so `npm run cluster -- start n4` reads as it is written.
  t.match(JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')).scripts.cluster, /node scripts\/cluster\.mjs$/);
  const out = execFileSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', timeout: 60_000 });
  t.match(out, /a cluster of 3 members runs from .* \(started n1, n2, n3\); the primary is n[123]\./, 'it says who the primary is');
  for (const id of IDS) t.match(out, new RegExp(`${id}  agent https://localhost:${configs[id]!.agent_port + offset}`), `it prints ${id}'s addresses`);
  t.match(out, /admin tokens .*admin-tokens\.json/, 'and the admin tokens file');
  t.match(out, new RegExp(`npm run apl -- --data-dir ${dir} --admin-url https://localhost:\\d+,https://localhost:\\d+,https://localhost:\\d+ cluster status`), 'and a status command that reaches this cluster with its CA');
  const pids = Object.values(JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>);
  t.equal(pids.length, 3);
  for (const pid of pids) t.ok(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('--v8-pool-size=0'), `process ${pid} runs with --v8-pool-size=0`);
  const again = execFileSync(process.execPath, [SCRIPT, 'start', ...args], { encoding: 'utf8', timeout: 60_000 });
  t.match(again, /\(n1, n2, n3 already running\)/, 'a second start leaves the running members alone');
  process.kill(pids[1]!, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  // Without the option: the directory keeps the ports its cluster started with.
  const back = execFileSync(process.execPath, [SCRIPT, 'start', '--dir', dir], { encoding: 'utf8', timeout: 60_000 });
  t.match(back, /\(started n2\); the primary is n[123]\./, 'after a kill, start brings back only the missing member, on its own ports');
  const moved = spawnSync(process.execPath, [SCRIPT, 'start', '--dir', dir, '--port-offset', String(offset + 1)], { encoding: 'utf8', timeout: 60_000 });
  t.equal(moved.status, 1, 'other ports for a cluster that runs are refused');
  t.match(moved.stderr, new RegExp(`was started with --port-offset ${offset}, not --port-offset ${offset + 1}`));
  // A member that ran before and lost its data is refused, not bootstrapped afresh.
  const n3 = (JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>).n3!;
  process.kill(n3, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  rmSync(join(dir, 'n3'), { recursive: true, force: true });
  const wiped = spawnSync(process.execPath, [SCRIPT, 'start', ...args], { encoding: 'utf8', timeout: 60_000 });
  t.equal(wiped.status, 1, 'start fails when a member is refused');
  t.match(wiped.stderr, /n3 did not start/, 'and names it');
  t.match(wiped.stderr, /member n3 has an empty store, but its configuration says cluster "apl-dev-cluster" already runs/, 'with the reason from its log');
  // A spare starts on its own and says how to add it.
  const spare = execFileSync(process.execPath, [SCRIPT, 'start', 'n4', ...args], { encoding: 'utf8', timeout: 60_000 });
  t.match(spare, /n4 runs from .* and waits to be added \(cluster_state join\)/);
  t.match(spare, new RegExp(`cluster add n4 127\\.0\\.0\\.1:${configs.n4!.peer_port + offset}`), 'with the command that adds it');
  pids.splice(0, pids.length, ...Object.values(JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>));
  const stop = execFileSync(process.execPath, [SCRIPT, 'stop', ...args], { encoding: 'utf8', timeout: 60_000 });
  t.match(stop, /stopped n1, n2, n4/, "every member that runs (n3 was refused)");
  for (const pid of pids) t.notOk(alive(pid), `process ${pid} is gone`);
});

t.test('npm run cluster --base-port puts every member\'s ports in one window; ports in the environment are refused', async (t) => {
  const dir = scratch(t, 'apl-cluster-window-');
  const env = scriptEnv();
  const base = await freeWindow(15);
  const args = ['--dir', dir, '--base-port', String(base)];
  const ignored = spawnSync(process.execPath, [SCRIPT, 'start', ...args], { encoding: 'utf8', env: { ...env, APL_AGENT_PORT: '8443' }, timeout: 60_000 });
  t.equal(ignored.status, 1, 'a port in the environment would be one member\'s or all of theirs: refused, not ignored');
  t.match(ignored.stderr, /npm run cluster sets each member's address itself; unset APL_AGENT_PORT and use --base-port or --port-offset/);
  const both = spawnSync(process.execPath, [SCRIPT, 'start', ...args, '--port-offset', '5'], { encoding: 'utf8', env, timeout: 60_000 });
  t.equal(both.status, 1);
  t.match(both.stderr, /give one/);
  t.teardown(() => spawnSync(process.execPath, [SCRIPT, 'stop', '--dir', dir], { env }));
  const out = execFileSync(process.execPath, [SCRIPT, 'start', ...args], { encoding: 'utf8', env, timeout: 60_000 });
  IDS.forEach((id, k) => {
    const at = base + 3 * k;
    t.match(out, new RegExp(`${id}  agent https://localhost:${at}   admin https://localhost:${at + 1}   peer 127\\.0\\.0\\.1:${at + 2}`), `${id} listens at ${at} to ${at + 2}`);
  });
  const spare = execFileSync(process.execPath, [SCRIPT, 'start', 'n4', '--dir', dir], { encoding: 'utf8', env, timeout: 60_000 });
  t.match(spare, new RegExp(`cluster add n4 127\\.0\\.0\\.1:${base + 11} https://localhost:${base + 9} https://localhost:${base + 10}`), 'a spare started later takes its place in the window');
  execFileSync(process.execPath, [SCRIPT, 'stop', '--dir', dir], { encoding: 'utf8', env, timeout: 60_000 });
});

t.test('cluster:stop signals only its own members: a pid file naming another program\'s process leaves it alone; a member not running is named', async (t) => {
  const dir = scratch(t, 'apl-cluster-pids-');
  // After a crash of every member (or a reboot) the pid file may name a pid another program has since.
  const other = spawn('sleep', ['600'], { stdio: 'ignore' });
  t.teardown(() => other.kill('SIGKILL'));
  writeFileSync(join(dir, 'pids.json'), JSON.stringify({ n1: other.pid }));
  const stop = spawnSync(process.execPath, [SCRIPT, 'stop', '--dir', dir], { encoding: 'utf8', env: scriptEnv(), timeout: 60_000 });
  t.equal(stop.status, 0);
  t.match(stop.stdout, `n1 was not running (pid ${other.pid} is gone, or another program's)`);
  t.match(stop.stdout, /no member was stopped; data kept in /);
  t.ok(alive(other.pid!), 'the other program was not signalled');
  writeFileSync(join(dir, 'pids.json'), JSON.stringify({ n1: other.pid }));
  const one = spawnSync(process.execPath, [SCRIPT, 'stop', 'n5', '--dir', dir], { encoding: 'utf8', env: scriptEnv(), timeout: 60_000 });
  t.equal(one.stdout, `n5 was not running\nno member was stopped; data kept in ${dir}\n`, 'a member named that never ran is said to be not running');
});

t.test('one run at a time per directory: a run holding it refuses another; a lock left by a run that died, or naming another program, is taken over', async (t) => {
  const dir = scratch(t, 'apl-cluster-lock-');
  const lock = join(dir, 'cluster.lock');
  const stop = () => spawnSync(process.execPath, [SCRIPT, 'stop', '--dir', dir], { encoding: 'utf8', env: scriptEnv(), timeout: 60_000 });
  // A run of the script as /proc shows it: its command line names scripts/cluster.mjs.
  const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 600_000)', SCRIPT], { stdio: 'ignore' });
  t.teardown(() => holder.kill('SIGKILL'));
  await new Promise((r) => holder.once('spawn', r));
  writeFileSync(lock, `${holder.pid}\n`);
  const refused = stop();
  t.equal(refused.status, 1);
  t.equal(refused.stderr, `another run of npm run cluster (pid ${holder.pid}) is starting or stopping the cluster in ${dir}: wait for it to end, then run this again\n`);
  t.equal(readFileSync(lock, 'utf8'), `${holder.pid}\n`, 'the lock is left to its holder');
  holder.kill('SIGKILL');
  await new Promise((r) => holder.once('exit', r));
  const after = stop();
  t.equal(after.status, 0, after.stderr);
  t.equal(after.stdout, `no cluster runs from ${dir}\n`, 'the lock of a run that died is taken over');
  t.notOk(existsSync(lock), 'and released at the end');
  writeFileSync(lock, `${process.pid}\n`);
  t.equal(stop().status, 0, 'a pid another program holds is no run of this script');
});

t.test('a first start that fails part-way stops the members that did start, so that the ports may be placed elsewhere', async (t) => {
  const dir = scratch(t, 'apl-cluster-first-');
  const env = scriptEnv();
  const base = await freeWindow(15);
  // n1's agent port is taken by another program.
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(base, '127.0.0.1', resolve));
  t.teardown(() => holder.close());
  t.teardown(() => spawnSync(process.execPath, [SCRIPT, 'stop', '--dir', dir], { env }));
  const first = spawnSync(process.execPath, [SCRIPT, 'start', '--dir', dir, '--base-port', String(base)], { encoding: 'utf8', env, timeout: 90_000 });
  t.equal(first.status, 1);
  t.match(first.stderr, /n1 did not start \(the log above says why\); n2, n3, which did, were stopped again\. If a port is taken .* place the cluster's ports elsewhere with --port-offset or --base-port/);
  t.notOk(existsSync(join(dir, 'ports.json')), 'no layout is kept: the next start may ask for another');
  const pids = JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>;
  t.same(pids, {}, 'the pid file names no member');
  for (const id of ['n2', 'n3']) t.notOk(readdirSync('/proc').some((p) => /^\d+$/.test(p) && procEnv(Number(p)).includes(`APL_DATA_DIR=${join(dir, id)}`)), `${id} no longer runs`);
});

t.test('npm run cluster follows the membership: a member added comes back with the others, one removed stays down; a spare joins while a member added at run time leads', async (t) => {
  const dir = scratch(t, 'apl-cluster-members-');
  const env = scriptEnv();
  const base = await freeWindow(15);
  const run = (...args: string[]) => spawnSync(process.execPath, [SCRIPT, ...args, '--dir', dir], { encoding: 'utf8', env, timeout: 60_000 });
  t.teardown(() => run('stop'));
  t.equal(run('--base-port', String(base)).status, 0);
  const spare = run('start', 'n4');
  t.match(spare.stdout, new RegExp(`npm run apl -- --data-dir ${dir} --admin-url https://localhost:${base + 1},https://localhost:${base + 4},https://localhost:${base + 7} cluster add n4 `), 'the command that adds it reaches this cluster');
  const admin = [1, 4, 7].map((k) => `https://localhost:${base + k}`).join(',');
  const apl = (...args: string[]) => execFileSync(process.execPath, [join(REPO, 'packages/cli/bin/apl.mjs'), '--data-dir', dir, '--admin-url', admin, ...args], { encoding: 'utf8', timeout: 60_000 });
  apl('cluster', 'add', 'n4', `127.0.0.1:${base + 11}`, `https://localhost:${base + 9}`, `https://localhost:${base + 10}`);
  await retried(() => apl('cluster', 'promote', 'n4'), 50, 200); // once it has caught up
  apl('cluster', 'remove', 'n3');
  await retried(() => readFileSync(join(dir, 'n3', 'REMOVED')), 50, 200); // n3 has applied its removal
  const lingering = run();
  t.equal(lingering.status, 0, lingering.stderr);
  t.match(lingering.stdout, `n3 was removed from the cluster and still runs, serving nothing: npm run cluster -- stop n3 --dir ${dir} stops it.`, 'a removed member still running is pointed out');
  // As in the runbook: the removed member is stopped; later another member dies.
  t.equal(run('stop', 'n3').status, 0);
  // A spare started while n4, added at run time and in no file of n5's, leads: it is
  // started knowing the members in force, takes the log from n4, and can be promoted.
  apl('cluster', 'transfer', 'n4');
  t.equal(run('start', 'n5').status, 0);
  apl('cluster', 'add', 'n5', `127.0.0.1:${base + 14}`, `https://localhost:${base + 12}`, `https://localhost:${base + 13}`);
  await retried(() => apl('cluster', 'promote', 'n5'), 50, 200);
  apl('cluster', 'remove', 'n5');
  t.equal(run('stop', 'n5').status, 0);
  const pids = JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>;
  process.kill(pids.n2!, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  const back = run();
  t.equal(back.status, 0, back.stderr);
  t.match(back.stdout, /a cluster of 3 members runs from .* \(started n2\); the primary is n[124]\./, 'the dead member comes back, the removed one does not');
  t.match(back.stdout, /\n  n4  agent /);
  t.notMatch(back.stdout, /\n  n3  agent /);
  t.equal(run('stop').status, 0);
  t.same(JSON.parse(readFileSync(join(dir, 'members.json'), 'utf8')), { voters: ['n1', 'n2', 'n4'], learners: [], removed: ['n3', 'n5'] }, 'the membership as it stood when the cluster stopped');
  const all = run();
  t.match(all.stdout, /\(started n1, n2, n4\)/, 'a start after a full stop brings back the members in force');
  // A member dies and is removed while it is down (no REMOVED in its directory); then the host
  // crashes: members.json is the one written at the last stop, but the members' own MEMBERS say who they are.
  const before = JSON.parse(readFileSync(join(dir, 'pids.json'), 'utf8')) as Record<string, number>;
  const leader = (JSON.parse(apl('--json', 'cluster', 'status')) as { leader: string }).leader;
  const victim = ['n2', 'n1', 'n4'].find((id) => id !== leader)!; // a follower: its death costs no election
  const survivors = ['n1', 'n2', 'n4'].filter((id) => id !== victim);
  process.kill(before[victim]!, 'SIGKILL');
  await retried(() => apl('cluster', 'remove', victim), 20, 500);
  for (const id of survivors) process.kill(before[id]!, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  const afterCrash = run();
  t.equal(afterCrash.status, 0, afterCrash.stderr);
  t.match(afterCrash.stdout, new RegExp(`a cluster of 2 members runs from .* \\(started ${survivors.join(', ')}\\); the primary is n[124]\\.`), 'the membership its members applied, not the last stop\'s');
  t.notMatch(afterCrash.stdout, new RegExp(`\\n  ${victim}  agent `));
  // Removed while it was down, it wrote no REMOVED: the membership in force says it was removed.
  const removedWhileDown = run('start', victim);
  t.equal(removedWhileDown.status, 1);
  t.match(removedWhileDown.stderr, new RegExp(`${victim} was removed from the cluster \\(the cluster's membership lists ${victim} as removed\\) and is not started again`));
  const removed = run('start', 'n3');
  t.equal(removed.status, 1);
  t.match(removed.stderr, /n3 was removed from the cluster \(REMOVED in .*n3\) and is not started again/);
  const help = spawnSync(process.execPath, [SCRIPT, '--help'], { encoding: 'utf8' });
  t.equal(help.status, 0);
  t.match(help.stdout, /npm run cluster -- start n4/);
  const bad = spawnSync(process.execPath, [SCRIPT, '--bogus'], { encoding: 'utf8' });
  t.equal(bad.status, 1);
  t.equal(bad.stderr, 'unknown option --bogus: the options are --dir, --port-offset, --base-port and --help; npm run cluster -- --help says more\n');
});

/** Runs `call` until it does not throw, at most `tries` more times `ms` apart; then throws its error. */
async function retried(call: () => unknown, tries: number, ms: number): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      call();
      return;
    } catch (err) {
      if (i === tries) throw err;
      await new Promise((r) => setTimeout(r, ms));
    }
  }
}

/** A scratch directory for one test's cluster, removed after it. */
function scratch(t: { teardown(fn: () => void): unknown }, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** This process's environment without the variables npm run cluster refuses (it sets each member's address). */
function scriptEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['APL_HOST', 'APL_AGENT_PORT', 'APL_ADMIN_PORT', 'APL_PEER_PORT', 'APL_MEMBERS']) delete env[name];
  return env;
}

/** A window of `size` ports free on 127.0.0.1, below the kernel's ephemeral range. */
async function freeWindow(size: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    if ((await Promise.all(Array.from({ length: size }, (_, i) => isFree(base + i)))).every(Boolean)) return base;
  }
  throw new Error('no free window of ports');
}

t.test('every way to start a node gives V8 one background thread fewer than the CPUs', async (t) => {
  const start = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
  t.match(start, /&& node --v8-pool-size=0 packages\/node\/dist\/main\.js$/, 'npm start');
  t.same(JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1] ?? 'null'), ['node', '--v8-pool-size=0', 'packages/node/dist/main.js'], 'the image');
  t.same(NODE_FLAGS, ['--v8-pool-size=0'], 'the tests and the benchmarks');
  // (npm run cluster: its processes' command lines are read in the test above.)
  const dir = mkdtempSync(join(tmpdir(), 'apl-v8-pool-'));
  const p = await spawnNode(nodeEnv(dir));
  t.teardown(async () => {
    await p.kill();
    rmSync(dir, { recursive: true, force: true });
  });
  const threads = readdirSync(`/proc/${p.pid}/task`).map((id) => readFileSync(`/proc/${p.pid}/task/${id}/comm`, 'utf8').trim());
  const cpus = availableParallelism();
  t.equal(threads.filter((n) => n === 'V8Worker').length, Math.max(1, cpus - 1), `${cpus} CPUs: ${Math.max(1, cpus - 1)} V8 background thread(s) (${threads.join(', ')})`);
});

t.test('an admin plane that requires client certificates refuses a caller without one; apl gives one with --cert and --key', async (t) => {
  const certs = testCerts();
  execFileSync('bash', [join(REPO, 'certs', 'dev-certs.sh'), certs.dir, '--client', 'operator'], { stdio: 'ignore' });
  const n = await startTestNode({ admin_client_certs: true });
  t.teardown(() => n.close());
  const call = (extra: { cert?: Buffer; key?: Buffer }) => new Promise<number | string>((resolve) => {
    const req = request(`${n.node.adminUrl}/admin/v1/cluster`, { ca: readFileSync(certs.ca), headers: { authorization: `Bearer ${TOKENS.operator}` }, ...extra }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', (err) => resolve(err.message));
    req.end();
  });
  t.equal(await call({ cert: readFileSync(join(certs.dir, 'operator-client.pem')), key: readFileSync(join(certs.dir, 'operator-client-key.pem')) }), 200, 'with the client certificate and the token');
  t.not(await call({}), 200, 'without a client certificate, refused');
  t.equal((await n.agent.request('GET', '/readyz')).status, 200, 'the agent plane asks no client certificate');
  // apl takes one with --cert and --key; without, it says what the node asks for.
  const env = { APL_ADMIN_URL: n.node.adminUrl, APL_CA: certs.ca, APL_ADMIN_TOKEN: TOKENS.operator };
  const withCert = await runApl(['log', 'digest', '--json', '--cert', join(certs.dir, 'operator-client.pem'), '--key', join(certs.dir, 'operator-client-key.pem')], env);
  t.equal(withCert.code, 0, withCert.stderr);
  t.match(JSON.parse(withCert.stdout), { applied_index: Number });
  const without = await runApl(['log', 'digest'], env);
  t.equal(without.code, 5);
  t.match(without.stderr, /\n  The node asks for a client certificate \(its admin_client_certs\): give yours with --cert and --key/);
  const half = await runApl(['log', 'digest', '--cert', join(certs.dir, 'operator-client.pem')], env);
  t.equal(half.code, 2);
  t.match(half.stderr, /^apl: --cert \(APL_CERT\) was given without --key \(APL_KEY\)\./);
});

/** Whether a process runs (a zombie, exited but not reaped by its new parent, does not). */
/** The environment a process started with, as NUL-separated `NAME=value` entries; empty once it has ended. */
function procEnv(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
