// Runs the three-node cluster of docker-compose.yml as local processes, from the same
// config files (deploy/n1.json ... n3.json), for machines without a container engine.
//
//   npm run cluster                 prepare, start n1..n3, wait until a primary is elected
//   npm run cluster -- start n4     start the spare n4 (deploy/n4.json, cluster_state join);
//                                   it waits until an operator adds it (docs/operations.md)
//   npm run cluster:stop            stop every member started (SIGTERM: a primary hands over first)
//   npm run cluster -- stop n2      stop only n2
//   npm run cluster:prepare         only the CA, node certificates (n1..n5) and admin tokens
//   npm run cluster -- --help       this text
//
// Members already running are left alone, so `npm run cluster` after a member was
// killed brings back that member only. A start without names starts the members in
// force, as a running member reports them or, when none runs, as the cluster last
// reported them (the newest MEMBERS file its members wrote at each change they applied,
// else members.json, written at each start and before a stop): spares added
// since come back, and a member removed from the cluster is never started again (by
// name either: its data directory holds REMOVED, or the membership in force lists it).
// A member counts as running when the pid kept for it (pids.json) is a process of the
// node with its config and data directory: a pid another program took since (after a
// crash of every member, or a reboot) is neither left alone nor stopped. A directory's
// first start that fails part-way stops the members it did start, so that the next may
// place the ports elsewhere. One run at a time per directory: a run while another starts
// or stops its members is refused (cluster.lock). A member started for the first time
// beside a running cluster is given the members in force, as a running member reports
// them, rather than its config file's (a member added since, n4 after a replacement,
// is in no file of deploy/).
//
// Options: --dir <path> (default .data/cluster) holds the certificates, the tokens,
// each node's data, logs and the pid file; --port-offset <n> moves every port by n
// (two clusters on one machine); --base-port <p> puts every port in one window
// instead, n1's agent, admin and peer ports at p, p+1, p+2, n2's at p+3 ... n5's at
// p+14. The ports a directory's cluster started with are kept (ports.json), so later
// starts and restarts use them without the option. The configs' container paths and
// addresses are overridden with APL_ variables: data and certificates under --dir,
// every listener on 127.0.0.1, each peer reached at 127.0.0.1 on its peer port.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const IDS = ['n1', 'n2', 'n3'];
/** spare members (deploy/n4.json, n5.json), started only when named. */
const SPARES = ['n4', 'n5'];
const DEFAULT_DIR = join(REPO, '.data', 'cluster');
let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: { dir: { type: 'string', default: DEFAULT_DIR }, 'port-offset': { type: 'string' }, 'base-port': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
} catch (err) {
  const unknown = /^Unknown option '([^']+)'/.exec(err.message);
  fail(`${unknown ? `unknown option ${unknown[1]}: the options are --dir, --port-offset, --base-port and --help` : err.message}; npm run cluster -- --help says more`);
}
const { values, positionals } = parsed;
if (values.help) {
  console.log(readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}
const commands = { prepare, start, stop };
// The command may be left out (npm run cluster is `cluster.mjs`, and `npm run cluster
// -- start n4` and `npm run cluster -- n4` both start n4).
const command = positionals[0] in commands ? positionals[0] : 'start';
const named = positionals[0] in commands ? positionals.slice(1) : positionals;
for (const id of named) if (![...IDS, ...SPARES].includes(id)) fail(`unknown ${positionals[0] === id ? 'command or member' : 'member'} ${id}: the commands are prepare, start and stop, the members ${[...IDS, ...SPARES].join(', ')}`);
const dir = resolve(values.dir);
const pidFile = join(dir, 'pids.json');
const portsFile = join(dir, 'ports.json');
/** where the members listen (portLayout), set when starting. */
let ports = { offset: 0 };
/** the members that ever started from this directory: they restart with cluster_state existing. */
const startedFile = join(dir, 'started.json');
/** the membership the cluster last reported: which members a start without names brings back. */
const membersFile = join(dir, 'members.json');
const certDir = join(dir, 'certs');
const tokens = join(dir, 'admin-tokens.json');

// One run at a time per directory: two starts at once each started some members and
// each wrote its own pid file, so that neither file named every member running, and
// `stop`, which signals only the members it names, left the others running.
holdDirectory();
await commands[command]();

async function prepare() {
  mkdirSync(dir, { recursive: true });
  // What it made is said; what it kept (every start after the first) is not.
  const made = spawnSync('bash', [join(REPO, 'certs', 'dev-certs.sh'), certDir, ...IDS, ...SPARES, '--client', 'operator'], { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  for (const line of made.stderr.split('\n')) if (made.status !== 0 ? line !== '' : line.startsWith('made ')) console.error(line);
  if (made.status !== 0) fail(`certs/dev-certs.sh failed (exit ${made.status ?? made.signal}): the lines above say why`);
  const { writeDevTokens } = await import(join(REPO, 'packages/node/dist/index.js'));
  writeDevTokens(tokens);
}

async function start() {
  // Each member's ports are set here, for all of them at once: a port in the
  // environment would be one member's or every member's, so it is refused, not ignored.
  const set = ['APL_HOST', 'APL_AGENT_PORT', 'APL_ADMIN_PORT', 'APL_PEER_PORT', 'APL_MEMBERS'].filter((name) => process.env[name] !== undefined);
  if (set.length > 0) fail(`npm run cluster sets each member's address itself; unset ${set.join(', ')} and use --base-port or --port-offset`);
  // Members still running are left alone: after a crash or a kill, start brings back
  // only the missing ones, as an SRE restarts one replica.
  const previous = existsSync(pidFile) ? JSON.parse(readFileSync(pidFile, 'utf8')) : {};
  const alive = Object.fromEntries(running(previous));
  ports = portLayout();
  await prepare();
  const everStarted = existsSync(startedFile) ? JSON.parse(readFileSync(startedFile, 'utf8')) : [];
  // Without names: the members in force, as a running member says (the log holds them,
  // not a config file), else as the cluster last said (membersFile); the first time n1..n3.
  const view = await currentMembers(alive) ?? lastMembers();
  // A member removed from the cluster refuses to serve for ever; it is not started again,
  // whether it wrote REMOVED itself or was removed while down (and perhaps restored
  // from a backup since): the membership in force lists it.
  const removedNamed = named.filter((id) => removed(id) || (view?.removed ?? []).includes(id));
  if (removedNamed.length > 0) {
    const where = removedNamed.map((id) => (removed(id) ? `REMOVED in ${join(dir, id)}` : `the cluster's membership lists ${id} as removed`)).join('; ');
    fail(`${removedNamed.join(', ')} ${removedNamed.length === 1 ? 'was' : 'were'} removed from the cluster (${where}) and ${removedNamed.length === 1 ? 'is' : 'are'} not started again; a replacement joins under a new id (docs/operations.md)`);
  }
  const ids = named.length > 0 ? named : inForce(view) ?? IDS;
  const configs = ids.map(deployConfig);
  const pids = { ...alive };
  const started = [];
  /** where each started member's log began this time, to read only its own lines. */
  const logFrom = {};
  for (const c of configs) {
    const id = c.node_id;
    if (alive[id]) continue;
    const logPath = join(dir, `${id}.log`);
    logFrom[id] = existsSync(logPath) ? statSync(logPath).size : 0;
    const log = openSync(logPath, 'a');
    const env = {
      ...process.env,
      APL_HOST: '127.0.0.1',
      APL_AGENT_PORT: String(port(id, 'agent', c.agent_port)),
      APL_ADMIN_PORT: String(port(id, 'admin', c.admin_port)),
      APL_PEER_PORT: String(port(id, 'peer', c.peer_port)),
      APL_MEMBERS: JSON.stringify(startingMembers(c, view, everStarted)),
      // A member that ran before rejoins a running cluster: if its data is gone, it is
      // refused rather than bootstrapped afresh (it would forget its votes).
      ...(everStarted.includes(id) ? { APL_CLUSTER_STATE: 'existing' } : {}),
      APL_DATA_DIR: join(dir, id),
      APL_TLS_CA: join(certDir, 'ca.pem'),
      APL_TLS_CERT: join(certDir, `${id}.pem`),
      APL_TLS_KEY: join(certDir, `${id}-key.pem`),
      APL_ADMIN_TOKENS_FILE: tokens,
    };
    const child = spawn(process.execPath, ['--v8-pool-size=0', join(REPO, 'packages/node/dist/main.js'), '--config', join(REPO, 'deploy', `${id}.json`)], { env, detached: true, stdio: ['ignore', log, log] });
    child.unref();
    pids[id] = child.pid;
    started.push(id);
  }
  writeFileSync(pidFile, `${JSON.stringify(pids, null, 2)}\n`);
  const refused = [];
  for (const id of started) if (!(await listening(id, pids[id], logFrom[id]))) refused.push(id);
  if (refused.length > 0) {
    // A member that exited is not kept as running: its pid may be another program's later
    // (one still starting after 30 s is, so that stop reaches it).
    for (const id of refused) if (running({ [id]: pids[id] }).length === 0) delete pids[id];
    writeFileSync(pidFile, `${JSON.stringify(pids, null, 2)}\n`);
    for (const id of refused) console.error(`--- ${id}.log\n${readFileSync(join(dir, `${id}.log`), 'utf8').slice(logFrom[id]).split('\n').slice(-15).join('\n')}`);
    const left = started.filter((id) => !refused.includes(id));
    if (!existsSync(portsFile)) {
      // The directory's first start: nothing has placed its ports yet. The members that
      // did start are stopped again, so that the next start may place them elsewhere
      // (members left at these ports would look for the others here for ever).
      await terminate(Object.fromEntries(left.map((id) => [id, pids[id]])));
      writeFileSync(pidFile, `${JSON.stringify(alive, null, 2)}\n`);
      fail(`${refused.join(', ')} did not start (the log above says why)${left.length > 0 ? `; ${left.join(', ')}, which did, ${left.length === 1 ? 'was' : 'were'} stopped again` : ''}. `
        + `If a port is taken (a standalone node on 8443 and 9443?), stop what holds it, or place the cluster's ports elsewhere with --port-offset or --base-port`);
    }
    fail(`${refused.join(', ')} did not start (the log above says why)${left.length > 0 ? `; ${left.join(', ')} started and still run` : ''}. `
      + `npm run cluster:stop${dirArg()} stops what runs; if a port is taken (a standalone node on 8443 and 9443?), stop what holds it: the cluster in ${dir} keeps the ports it first started with (${describe(ports)})`);
  }
  writeFileSync(startedFile, `${JSON.stringify([...new Set([...everStarted, ...started])].sort())}\n`);
  writeFileSync(portsFile, `${JSON.stringify(ports)}\n`);
  // A spare started for the first time waits to be added: there is no primary to wait for.
  if (configs.every((c) => c.cluster_state === 'join' && !everStarted.includes(c.node_id))) return printJoining(configs.map(self), everStarted, await currentMembers(alive));
  const members = Object.keys(pids).filter((id) => !removed(id)).sort().map((id) => self(deployConfig(id)));
  const primary = await electedLeader(members);
  const leader = primary.node;
  writeMembers(primary);
  // A member started is said to run once it serves: one that stops (a store refused by
  // the group) or stays cut off (a certificate its peers refuse) is said to, with why.
  const serving = await Promise.all(started.filter((id) => [...primary.voters, ...primary.learners].includes(id)).map(async (id) => [id, await readiness(id, pids[id])]));
  const notServing = serving.filter(([, r]) => r !== null);
  if (notServing.length > 0) {
    for (const [id] of notServing) console.error(`--- ${id}.log\n${readFileSync(join(dir, `${id}.log`), 'utf8').slice(logFrom[id]).split('\n').slice(-15).join('\n')}`);
    fail(notServing.map(([id, why]) => `${id} ${why}`).join('; '));
  }
  const what = started.length === 0 ? `${members.map((m) => m.id).join(', ')} already running` : `started ${started.join(', ')}`;
  // The cluster's size is its membership's, not the count of members running here.
  const inCluster = [...primary.voters, ...primary.learners];
  // Not started by this script and not answering the primary either (one started by hand answers it).
  const answering = new Set(primary.members.filter((m) => m.reachable === true).map((m) => m.id));
  const down = inCluster.filter((id) => !members.some((m) => m.id === id) && !answering.has(id));
  // This script brings back only the members it has a config for; another (added with apl and started by hand) is started by hand again.
  const ours = down.filter((id) => [...IDS, ...SPARES].includes(id));
  const theirs = down.filter((id) => !ours.includes(id));
  const downText = (ours.length === 0 ? '' : ` ${ours.join(', ')} ${ours.length === 1 ? 'does' : 'do'} not answer the primary: npm run cluster${dirArg()} brings ${ours.length === 1 ? 'it' : 'them'} back.`)
    + (theirs.length === 0 ? '' : ` ${theirs.join(', ')} ${theirs.length === 1 ? 'does' : 'do'} not answer the primary either, and ${theirs.length === 1 ? 'has' : 'have'} no config in deploy/: start ${theirs.length === 1 ? 'it' : 'them'} by hand.`);
  // A member removed while it ran serves nothing and waits to be stopped (docs/operations.md).
  const lingering = Object.keys(pids).filter((id) => removed(id) || primary.removed.includes(id));
  const lingeringText = lingering.length === 0 ? '' : ` ${lingering.join(', ')} ${lingering.length === 1 ? 'was' : 'were'} removed from the cluster and still ${lingering.length === 1 ? 'runs' : 'run'}, serving nothing: npm run cluster -- stop ${lingering.join(' ')}${dir === DEFAULT_DIR ? '' : ` --dir ${dir}`} stops ${lingering.length === 1 ? 'it' : 'them'}.`;
  const lines = ['', `agent-plane ledger: a cluster of ${inCluster.length} members runs from ${dir} (${what}); the primary is ${leader}.${downText}${lingeringText}`];
  for (const m of members) lines.push(`  ${m.id}  agent ${m.agent_url}   admin ${m.admin_url}   peer ${m.peer_addr}   log ${join(dir, `${m.id}.log`)}`);
  lines.push(
    `  CA ${join(certDir, 'ca.pem')}   admin tokens ${tokens}`,
    '',
    'Next:',
    `  TOKEN=$(node -p "require('${tokens}')['dev-author'].token")`,
    `  curl --cacert ${join(certDir, 'ca.pem')} -H "Authorization: Bearer $TOKEN" ${members[0].admin_url}/admin/v1/cluster`,
    `  npm run apl -- ${aplArgs(members)}cluster status`,
    `  npm run cluster:stop${dirArg()}`,
    '',
  );
  console.log(lines.join('\n'));
}

/** The membership a running member reports (its GET /admin/v1/cluster), or null when none answers. */
async function currentMembers(pids) {
  const ca = existsSync(join(certDir, 'ca.pem')) ? readFileSync(join(certDir, 'ca.pem')) : null;
  if (ca === null || !existsSync(tokens)) return null;
  const token = JSON.parse(readFileSync(tokens, 'utf8'))['dev-author'].token;
  for (const id of Object.keys(pids).filter((x) => !removed(x))) {
    const view = await get(`${self(deployConfig(id)).admin_url}/admin/v1/cluster`, token, ca).catch(() => null);
    if (view !== null && view.voters.length > 0) return view;
  }
  return null;
}

/**
 * The membership the cluster last reported here: the newest one its members wrote
 * (MEMBERS in each data directory, at every change they applied; so a change made with
 * apl while they ran counts after a crash of them all), else members.json (written at
 * a start, and before a stop).
 */
function lastMembers() {
  let newest = null;
  for (const id of [...IDS, ...SPARES]) {
    try {
      const m = JSON.parse(readFileSync(join(dir, id, 'MEMBERS'), 'utf8'));
      if (newest === null || m.index > newest.index) newest = m;
    } catch {
      // none written there (a member that never ran, or a wiped one)
    }
  }
  return newest ?? (existsSync(membersFile) ? JSON.parse(readFileSync(membersFile, 'utf8')) : null);
}

function writeMembers(view) {
  writeFileSync(membersFile, `${JSON.stringify({ voters: view.voters, learners: view.learners, removed: view.removed })}\n`);
}

/**
 * The members a member is started with: its config's, as reached here; but for a first
 * start beside a running cluster, the members in force as a running member reports them,
 * with the addresses the log holds, and its own entry. A member waiting to join knows
 * only the members it is started with, and refuses calls from any other: a member added
 * at run time (n4, after a replacement) is in no file of deploy/, and while it led, a
 * spare started from its file would never receive the log.
 */
function startingMembers(c, view, everStarted) {
  const configured = local(c.members);
  if (everStarted.includes(c.node_id) || !Array.isArray(view?.members)) return configured;
  const others = view.members
    .filter((m) => m.id !== c.node_id && !(view.removed ?? []).includes(m.id))
    .map(({ id, peer_addr, agent_url, admin_url }) => ({ id, peer_addr, agent_url, ...(admin_url ? { admin_url } : {}) }));
  return [...others, configured.find((m) => m.id === c.node_id)];
}

/** The members to start from a reported membership: voters and learners this script has configs for. */
function inForce(view) {
  if (view === null) return null;
  const ids = [...view.voters, ...view.learners].filter((id) => !removed(id) && !view.removed.includes(id));
  const foreign = ids.filter((id) => ![...IDS, ...SPARES].includes(id));
  if (foreign.length > 0) console.log(`${foreign.join(', ')} ${foreign.length === 1 ? 'is a member' : 'are members'} with no config in deploy/: start ${foreign.length === 1 ? 'it' : 'them'} by hand`);
  return ids.filter((id) => !foreign.includes(id)).sort();
}

/** Whether `id` was removed from the cluster (its node wrote REMOVED in its data directory). */
function removed(id) {
  return existsSync(join(dir, id, 'REMOVED'));
}

/** `--dir <dir> ` for a command the user runs next, when the directory is not the default. */
function dirArg() {
  return dir === DEFAULT_DIR ? '' : ` -- --dir ${dir}`;
}

/**
 * What apl needs to reach this cluster's admin planes: its data directory always (apl
 * looks in .data/standalone by itself, whose CA this cluster's certificates are not
 * from), and the admin planes when they are not at the default ports.
 */
function aplArgs(members) {
  const defaultPorts = !('base' in ports) && ports.offset === 0;
  // Relative to the repository, where `npm run apl` runs, whatever directory this ran from.
  const shown = dir.startsWith(`${REPO}/`) ? relative(REPO, dir) : dir;
  return `--data-dir ${shown} ${defaultPorts ? '' : `--admin-url ${members.map((m) => m.admin_url).join(',')} `}`;
}

/** Spares started for the first time: what to run next to add them, at the members in force (`view`, a running member's). */
function printJoining(started, everStarted, view) {
  // apl reaches the members in force (the spares' own admin planes cannot add them):
  // as a running member reports them, else those of the spare's config that ran before.
  const members = view !== null
    ? view.members.filter((m) => m.admin_url !== null && !started.some((x) => x.id === m.id))
    : local(deployConfig(started[0].id).members).filter((m) => everStarted.includes(m.id) && !started.some((x) => x.id === m.id) && !removed(m.id));
  const lines = [''];
  for (const m of started) {
    lines.push(
      `agent-plane ledger: ${m.id} runs from ${join(dir, m.id)} and waits to be added (cluster_state join).`,
      `  ${m.id}  agent ${m.agent_url}   admin ${m.admin_url}   peer ${m.peer_addr}   log ${join(dir, `${m.id}.log`)}`,
      '',
      'Add it as a learner at any member, then promote it once it has caught up:',
      `  npm run apl -- ${aplArgs(members)}cluster add ${m.id} ${m.peer_addr} ${m.agent_url} ${m.admin_url}`,
      `  npm run apl -- ${aplArgs(members)}cluster promote ${m.id}`,
      '',
    );
  }
  console.log(lines.join('\n'));
}

async function stop() {
  if (!existsSync(pidFile)) {
    console.log(`no cluster runs from ${dir}`);
    return;
  }
  const all = JSON.parse(readFileSync(pidFile, 'utf8'));
  const asked = named.length > 0 ? named : Object.keys(all);
  const pids = Object.fromEntries(running(Object.fromEntries(Object.entries(all).filter(([id]) => asked.includes(id)))));
  for (const id of asked) if (!(id in pids)) console.log(`${id} was not running${id in all ? ` (pid ${all[id]} is gone, or another program's)` : ''}`);
  // The membership as it stands, for the next start without names.
  ports = portLayout();
  const view = await currentMembers(Object.fromEntries(running(all)));
  if (view !== null) writeMembers(view);
  for (const id of await terminate(pids)) console.log(`${id} did not stop in 30 s: killed`);
  const left = Object.fromEntries(Object.entries(all).filter(([id]) => !asked.includes(id)));
  if (Object.keys(left).length === 0) rmSync(pidFile);
  else writeFileSync(pidFile, `${JSON.stringify(left, null, 2)}\n`);
  const stopped = Object.keys(pids).sort();
  console.log(`${stopped.length === 0 ? 'no member was stopped' : `stopped ${stopped.join(', ')}`}; data kept in ${dir}`);
}

/** SIGTERM to the members of `pids` (pids by id) that run, then SIGKILL to those still running after 30 s; answers the ids killed so. */
async function terminate(pids) {
  for (const [, pid] of running(pids)) process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 30_000;
  while (running(pids).length > 0 && Date.now() < deadline) await sleep(100);
  const killed = running(pids);
  for (const [, pid] of killed) process.kill(pid, 'SIGKILL');
  return killed.map(([id]) => id);
}

/** Waits until a started member logged that it listens (true) or exited (false). */
/**
 * Null once a started member serves (its /readyz answers 200); else why not, when it
 * exits or 30 s pass: what its /readyz said last.
 */
async function readiness(id, pid) {
  const ca = readFileSync(join(certDir, 'ca.pem'));
  const url = `${self(deployConfig(id)).agent_url}/readyz`;
  const deadline = Date.now() + 30_000;
  let said = 'did not answer';
  while (Date.now() < deadline) {
    if (running({ [id]: pid }).length === 0) return 'stopped after it started (its log above says why)';
    const r = await status(url, ca).catch(() => null);
    if (r?.code === 200) return null;
    if (r) said = `answered ${r.code}: ${r.body.reason ?? r.body.status ?? ''}`;
    await sleep(200);
  }
  return `runs but does not serve after 30 s: its /readyz ${said} (its log above may say why)`;
}

async function listening(id, pid, from) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (readFileSync(join(dir, `${id}.log`), 'utf8').slice(from).includes('"event":"node_started"')) return true;
    if (running({ [id]: pid }).length === 0) return false;
    await sleep(100);
  }
  return false;
}

/**
 * Waits until a member says it is the primary and every member that names a primary
 * names it, a majority of its voters among them (a spare still waiting to be added
 * names none); prints the logs' tails and exits if none is in 30 s.
 */
async function electedLeader(members) {
  const token = JSON.parse(readFileSync(tokens, 'utf8'))['dev-author'].token;
  const ca = readFileSync(join(certDir, 'ca.pem'));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const views = (await Promise.all(members.map((m) => get(`${m.admin_url}/admin/v1/cluster`, token, ca).catch(() => null)))).filter(Boolean);
    const primary = views.find((v) => v.role === 'leader');
    const naming = views.filter((v) => v.leader !== null && v.leader !== undefined);
    if (primary && naming.every((v) => v.leader === primary.node) && naming.filter((v) => primary.voters.includes(v.node)).length > primary.voters.length / 2) return primary;
    await sleep(200);
  }
  for (const m of members) console.error(`--- ${m.id}.log\n${readFileSync(join(dir, `${m.id}.log`), 'utf8').split('\n').slice(-15).join('\n')}`);
  fail(`no primary was elected in 30 s (the logs above say why); npm run cluster:stop${dirArg()} stops what started`);
}

/** A GET, with the bearer token when one is given: its status and JSON body. */
function status(url, ca, token) {
  return new Promise((resolvePromise, reject) => {
    const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
    const req = request(url, { ca, headers, timeout: 2_000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => {
        try {
          resolvePromise({ code: res.statusCode, body: JSON.parse(body) });
        } catch (err) {
          reject(err);
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** A GET with the token, resolved with the JSON body of a 200 and rejected otherwise. */
async function get(url, token, ca) {
  const r = await status(url, ca, token);
  if (r.code !== 200) throw new Error(String(r.code));
  return r.body;
}

/**
 * Where this directory's members listen: the layout it first started with (ports.json),
 * or the one the options ask for. Asking for another layout than the one kept is
 * refused: the members already joined would still look for each other at the old ports.
 */
function portLayout() {
  const offset = values['port-offset'];
  const base = values['base-port'];
  if (offset !== undefined && base !== undefined) fail('--port-offset and --base-port are two ways to place the ports; give one');
  let asked = null;
  if (offset !== undefined) {
    const n = Number(offset);
    if (!/^\d+$/.test(offset) || n > 50_000) fail(`--port-offset must be a whole number from 0 to 50000, not ${offset}`);
    asked = { offset: n };
  }
  if (base !== undefined) {
    const n = Number(base);
    const last = 65_535 - 3 * (IDS.length + SPARES.length) + 1;
    if (!/^\d+$/.test(base) || n < 1024 || n > last) fail(`--base-port must be a whole number from 1024 to ${last} (five members take 15 ports from it), not ${base}`);
    asked = { base: n };
  }
  const kept = existsSync(portsFile) ? JSON.parse(readFileSync(portsFile, 'utf8')) : null;
  if (kept !== null && asked !== null && JSON.stringify(kept) !== JSON.stringify(asked)) {
    fail(`the cluster in ${dir} was started with ${describe(kept)}, not ${describe(asked)}; start it without the option, or use another --dir`);
  }
  return kept ?? asked ?? { offset: 0 };
}

function describe(layout) {
  return 'base' in layout ? `--base-port ${layout.base}` : `--port-offset ${layout.offset}`;
}

/** A member's port of a kind: its configured port moved by the offset, or its place in the window. */
function port(id, kind, configured) {
  if (!('base' in ports)) return configured + ports.offset;
  return ports.base + 3 * [...IDS, ...SPARES].indexOf(id) + ['agent', 'admin', 'peer'].indexOf(kind);
}

/** A member's config file, deploy/<id>.json. */
function deployConfig(id) {
  return JSON.parse(readFileSync(join(REPO, 'deploy', `${id}.json`), 'utf8'));
}

/** A config's own entry among its members, as reached here. */
function self(config) {
  return local(config.members).find((m) => m.id === config.node_id);
}

/** A config's members as they are reached here: every peer at 127.0.0.1, every port placed (port). */
function local(list) {
  return list.map((m) => ({
    ...m,
    peer_addr: `127.0.0.1:${port(m.id, 'peer', Number(m.peer_addr.split(':').pop()))}`,
    agent_url: moved(m.agent_url, port(m.id, 'agent', Number(new URL(m.agent_url).port))),
    admin_url: moved(m.admin_url, port(m.id, 'admin', Number(new URL(m.admin_url).port))),
  }));
}

function moved(url, to) {
  const u = new URL(url);
  u.port = String(to);
  return u.toString().replace(/\/$/, '');
}

/**
 * The members whose process still runs (a zombie, killed but not yet reaped, does not).
 * A pid is this directory's member only if its process runs the node with that member's
 * config and data directory: after a crash of them all or a reboot, the pid file may
 * name processes that ended, and their pids may since be another program's.
 */
function running(pids) {
  return Object.entries(pids).filter(([id, pid]) => {
    const args = commandLine(pid);
    if (args === null || args === true) return args === true;
    try {
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      return args.includes(join(REPO, 'packages/node/dist/main.js')) && args.includes(join(REPO, 'deploy', `${id}.json`)) && env.includes(`APL_DATA_DIR=${join(dir, id)}`);
    } catch {
      return false; // it ended meanwhile
    }
  });
}

/**
 * The command line of process `pid`, as /proc shows it: null when no such process
 * runs (or only its zombie), true when it runs and there is no /proc to ask (not
 * Linux: the pid is then taken at its word).
 */
function commandLine(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return null;
  }
  if (!existsSync('/proc/self')) return true;
  try {
    if (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] === 'Z') return null;
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return null; // it ended meanwhile
  }
}

/**
 * Takes the directory for this run (`cluster.lock`, holding this process's pid), or
 * refuses while another run of this script holds it. A lock left by a run that died
 * (its pid gone, or taken since by another program) is taken over.
 */
function holdDirectory() {
  if (command === 'stop' && !existsSync(dir)) return; // nothing to stop, and no directory to make
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, 'cluster.lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: 'wx' });
      process.on('exit', () => {
        try {
          if (readFileSync(lock, 'utf8').trim() === String(process.pid)) rmSync(lock);
        } catch {
          // removed already
        }
      });
      return;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    let holder;
    try {
      holder = Number.parseInt(readFileSync(lock, 'utf8'), 10);
    } catch {
      continue; // its holder ended meanwhile and removed it
    }
    if (Number.isInteger(holder) && holder > 0 && isThisScript(holder)) {
      fail(`another run of npm run cluster (pid ${holder}) is starting or stopping the cluster in ${dir}: wait for it to end, then run this again`);
    }
    rmSync(lock, { force: true });
  }
  fail(`could not take ${lock}: runs of npm run cluster keep taking it`);
}

/** Whether `pid` is a run of this script (not one that ended, nor another program that took its pid since). */
function isThisScript(pid) {
  const args = commandLine(pid);
  return args === true || (args !== null && args.includes(fileURLToPath(import.meta.url)));
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function fail(message) {
  console.error(message);
  process.exit(1);
}
