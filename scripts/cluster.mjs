// Runs the three-node cluster of docker-compose.yml as local processes, from the same
// config files (deploy/n1.json ... n3.json), for machines without a container engine.
//
//   npm run cluster                 prepare, start n1..n3, wait until a primary is elected
//   npm run cluster:stop            stop them (SIGTERM: a primary hands over first)
//   npm run cluster:prepare         only the CA, node certificates and admin tokens
//
// Members already running are left alone, so `npm run cluster` after a member was
// killed brings back that member only.
//
// Options: --dir <path> (default .data/cluster) holds the certificates, the tokens,
// each node's data, logs and the pid file; --port-offset <n> moves every port by n
// (two clusters on one machine). The configs' container paths and addresses are
// overridden with APL_ variables: data and certificates under --dir, every listener
// on 127.0.0.1, each peer reached at 127.0.0.1 on its configured peer port.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const IDS = ['n1', 'n2', 'n3'];
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { dir: { type: 'string', default: join(REPO, '.data', 'cluster') }, 'port-offset': { type: 'string', default: '0' } },
});
const command = positionals[0] ?? 'start';
const dir = resolve(values.dir);
const offset = Number(values['port-offset']);
if (!Number.isInteger(offset) || offset < 0 || offset > 50_000) fail(`--port-offset must be a whole number from 0 to 50000, not ${values['port-offset']}`);
const pidFile = join(dir, 'pids.json');
const certDir = join(dir, 'certs');
const tokens = join(dir, 'admin-tokens.json');

const commands = { prepare, start, stop };
if (!(command in commands)) fail(`unknown command ${command}: prepare, start or stop`);
await commands[command]();

async function prepare() {
  mkdirSync(dir, { recursive: true });
  execFileSync('bash', [join(REPO, 'certs', 'dev-certs.sh'), certDir, ...IDS, '--client', 'operator'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const { writeDevTokens } = await import(join(REPO, 'packages/node/dist/index.js'));
  writeDevTokens(tokens);
}

async function start() {
  // Members still running are left alone: after a crash or a kill, start brings back
  // only the missing ones, as an SRE restarts one replica.
  const previous = existsSync(pidFile) ? JSON.parse(readFileSync(pidFile, 'utf8')) : {};
  const alive = Object.fromEntries(running(previous));
  await prepare();
  const configs = IDS.map((id) => JSON.parse(readFileSync(join(REPO, 'deploy', `${id}.json`), 'utf8')));
  const members = configs[0].members.map((m) => ({
    ...m,
    peer_addr: `127.0.0.1:${Number(m.peer_addr.split(':').pop()) + offset}`,
    agent_url: shift(m.agent_url),
    admin_url: shift(m.admin_url),
  }));
  const pids = { ...alive };
  const started = [];
  for (const c of configs) {
    const id = c.node_id;
    if (alive[id]) continue;
    const log = openSync(join(dir, `${id}.log`), 'a');
    const env = {
      ...process.env,
      APL_HOST: '127.0.0.1',
      APL_AGENT_PORT: String(c.agent_port + offset),
      APL_ADMIN_PORT: String(c.admin_port + offset),
      APL_PEER_PORT: String(c.peer_port + offset),
      APL_MEMBERS: JSON.stringify(members),
      APL_DATA_DIR: join(dir, id),
      APL_TLS_CA: join(certDir, 'ca.pem'),
      APL_TLS_CERT: join(certDir, `${id}.pem`),
      APL_TLS_KEY: join(certDir, `${id}-key.pem`),
      APL_ADMIN_TOKENS_FILE: tokens,
    };
    const child = spawn(process.execPath, [join(REPO, 'packages/node/dist/main.js'), '--config', join(REPO, 'deploy', `${id}.json`)], { env, detached: true, stdio: ['ignore', log, log] });
    child.unref();
    pids[id] = child.pid;
    started.push(id);
  }
  writeFileSync(pidFile, `${JSON.stringify(pids, null, 2)}\n`);
  const leader = await electedLeader(members);
  const what = started.length === 0 ? 'all three members already run' : `started ${started.join(', ')}`;
  const lines = ['', `agent-plane ledger: a three-node cluster runs from ${dir} (${what}); the primary is ${leader}.`];
  for (const m of members) lines.push(`  ${m.id}  agent ${m.agent_url}   admin ${m.admin_url}   peer ${m.peer_addr}   log ${join(dir, `${m.id}.log`)}`);
  lines.push(
    `  CA ${join(certDir, 'ca.pem')}   admin tokens ${tokens}`,
    '',
    'Next:',
    `  TOKEN=$(node -p "require('${tokens}')['dev-author'].token")`,
    `  curl --cacert ${join(certDir, 'ca.pem')} -H "Authorization: Bearer $TOKEN" ${members[0].admin_url}/admin/v1/cluster`,
    '  npm run cluster:stop',
    '',
  );
  console.log(lines.join('\n'));
}

async function stop() {
  if (!existsSync(pidFile)) {
    console.log(`no cluster runs from ${dir}`);
    return;
  }
  const pids = JSON.parse(readFileSync(pidFile, 'utf8'));
  for (const [id, pid] of Object.entries(pids)) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      console.log(`${id} (pid ${pid}) was not running`);
    }
  }
  const deadline = Date.now() + 30_000;
  while (running(pids).length > 0 && Date.now() < deadline) await sleep(100);
  for (const [id] of running(pids)) {
    console.log(`${id} did not stop in 30 s: killed`);
    process.kill(pids[id], 'SIGKILL');
  }
  rmSync(pidFile);
  console.log(`stopped ${Object.keys(pids).sort().join(', ')}; data kept in ${dir}`);
}

/** Waits until every member names the same primary; prints the logs' tails and exits if none is in 30 s. */
async function electedLeader(members) {
  const token = JSON.parse(readFileSync(tokens, 'utf8'))['dev-author'].token;
  const ca = readFileSync(join(certDir, 'ca.pem'));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const views = await Promise.all(members.map((m) => get(`${m.admin_url}/admin/v1/cluster`, token, ca).catch(() => null)));
    const leaders = new Set(views.map((v) => v?.leader ?? null));
    if (leaders.size === 1 && !leaders.has(null)) return [...leaders][0];
    await sleep(200);
  }
  for (const m of members) console.error(`--- ${m.id}.log\n${readFileSync(join(dir, `${m.id}.log`), 'utf8').split('\n').slice(-15).join('\n')}`);
  fail('no primary was elected in 30 s (the logs above say why); npm run cluster:stop stops what started');
}

function get(url, token, ca) {
  return new Promise((resolvePromise, reject) => {
    const req = request(url, { ca, headers: { authorization: `Bearer ${token}` }, timeout: 2_000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => (res.statusCode === 200 ? resolvePromise(JSON.parse(body)) : reject(new Error(String(res.statusCode)))));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

function shift(url) {
  const u = new URL(url);
  u.port = String(Number(u.port) + offset);
  return u.toString().replace(/\/$/, '');
}

/** The members whose process still runs (a zombie, killed but not yet reaped, does not). */
function running(pids) {
  return Object.entries(pids).filter(([, pid]) => {
    try {
      process.kill(pid, 0);
    } catch {
      return false;
    }
    try {
      return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
    } catch {
      return true;
    }
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function fail(message) {
  console.error(message);
  process.exit(1);
}
