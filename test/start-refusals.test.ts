// Proves that a node that cannot start says why in the terms of its configuration
// and exits 2, having changed nothing: a port another process holds (naming the plane
// and its setting), an option it does not know, a CA file with no certificate, a
// certificate that does not go with its key, and a data directory a running node
// holds (found before the development setup writes into it); and an APL_ variable
// that sets nothing is named when the node starts. --help only prints the usage.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testCerts } from './support/node.js';
import { MAIN_JS, NODE_FLAGS, nodeEnv, spawnNode } from './support/process.js';

const dir = mkdtempSync(join(tmpdir(), 'apl-refusals-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function start(env: Record<string, string>, args: string[] = []): { status: number | null; stderr: string } {
  // A node that starts when it should have refused is killed well within the file's own
  // time-out, so that a failing test never leaves a server running.
  const r = spawnSync(process.execPath, [...NODE_FLAGS, MAIN_JS, ...args], { env, encoding: 'utf8', timeout: 10_000, killSignal: 'SIGKILL' });
  return { status: r.status, stderr: r.stderr };
}

t.test('a port another process holds: exit 2, naming the plane and its setting', async (t) => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => holder.close(() => r())));
  const port = (holder.address() as AddressInfo).port;
  const r = start(nodeEnv(join(dir, 'port'), { APL_ADMIN_PORT: String(port) }));
  t.equal(r.status, 2, r.stderr);
  t.equal(r.stderr.trim(), `cannot listen on 127.0.0.1:${port} for the admin plane (admin_port, APL_ADMIN_PORT): another process listens there (EADDRINUSE). Stop what holds it, or give this node another port.`);
  // The agent plane binds on a thread of its own, which hands its error over whole.
  const agent = start(nodeEnv(join(dir, 'port-agent'), { APL_AGENT_PORT: String(port) }));
  t.equal(agent.status, 2, agent.stderr);
  t.equal(agent.stderr.trim(), `cannot listen on 127.0.0.1:${port} for the agent plane (agent_port, APL_AGENT_PORT): another process listens there (EADDRINUSE). Stop what holds it, or give this node another port.`);
  t.notOk(existsSync(join(dir, 'port')) || existsSync(join(dir, 'port-agent')), 'the refused start made no data directory');
});

t.test('--help prints the usage and exits, starting nothing', async (t) => {
  const r = spawnSync(process.execPath, [...NODE_FLAGS, MAIN_JS, '--help'], { env: nodeEnv(join(dir, 'help')), encoding: 'utf8', timeout: 10_000, killSignal: 'SIGKILL' });
  t.equal(r.signal, null, 'not killed by the time-out');
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^usage: node packages\/node\/dist\/main\.js \[--config <file\.json>\]/);
  t.notOk(existsSync(join(dir, 'help')), 'and nothing is made');
});

t.test('an option it does not know: exit 2 with the usage', async (t) => {
  const r = start(nodeEnv(join(dir, 'option')), ['--bogus']);
  t.equal(r.status, 2);
  t.match(r.stderr, /^Unknown option '--bogus'[^]*\n\nusage: node packages\/node\/dist\/main\.js \[--config <file\.json>\]/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

t.test('TLS files that cannot work: exit 2 naming the setting and the file', async (t) => {
  const certs = testCerts();
  const garbage = join(dir, 'garbage.pem');
  writeFileSync(garbage, 'not a certificate\n');
  const ca = start(nodeEnv(join(dir, 'ca'), { APL_TLS_CA: garbage, APL_ADMIN_CLIENT_CERTS: 'true' }));
  t.equal(ca.status, 2, ca.stderr);
  t.equal(ca.stderr.trim(), `tls.ca: ${garbage} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)`);
  const otherKey = join(certs.dir, 'n2-key.pem');
  const mismatch = start(nodeEnv(join(dir, 'key'), { APL_TLS_KEY: otherKey }));
  t.equal(mismatch.status, 2, mismatch.stderr);
  t.match(mismatch.stderr.trim(), new RegExp(`^tls\\.cert and tls\\.key: ${certs.cert} and ${otherKey} cannot be used together \\(.*key values mismatch.*\\)$`));
  t.notOk(existsSync(join(dir, 'ca')) || existsSync(join(dir, 'key')), 'no data directory was made');
});

t.test('a certificate its peers or clients would refuse: exit 2 naming tls.cert', async (t) => {
  const certs = testCerts();
  // An expired certificate with its own key (openssl takes a negative -days).
  const key = join(dir, 'expired-key.pem');
  const cert = join(dir, 'expired.pem');
  // The request is written to a file first: x509 reads the key, which req writes.
  const csr = join(dir, 'expired.csr');
  const made = spawnSync('bash', ['-c', `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ${key} -subj /CN=n1 -out ${csr} 2>/dev/null `
    + `&& openssl x509 -req -in ${csr} -signkey ${key} -days -1 -out ${cert} 2>/dev/null`], { encoding: 'utf8' });
  t.equal(made.status, 0, made.stderr);
  const expired = start(nodeEnv(join(dir, 'expired'), { APL_TLS_CERT: cert, APL_TLS_KEY: key }));
  t.equal(expired.status, 2, expired.stderr);
  t.match(expired.stderr.trim(), new RegExp(`^tls\\.cert: ${cert} expired on \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z; peers and clients refuse it\\. Issue a new certificate`));
  // A cluster member given another member's certificate.
  const members = ['n1', 'n2', 'n3'].map((id, k) => ({ id, peer_addr: `127.0.0.1:${20_001 + k}`, agent_url: `https://127.0.0.1:${20_011 + k}`, admin_url: `https://127.0.0.1:${20_021 + k}` }));
  const other = start(nodeEnv(join(dir, 'other'), {
    APL_NODE_ID: 'n1', APL_MEMBERS: JSON.stringify(members), APL_TLS_CERT: join(certs.dir, 'n2.pem'), APL_TLS_KEY: join(certs.dir, 'n2-key.pem'),
  }));
  t.equal(other.status, 2, other.stderr);
  t.match(other.stderr.trim(), /^tls\.cert: \S+n2\.pem names CN=n2 \(DNS n2, [^)]*\), not member n1: its peers take a member to be the one its certificate names/);
  t.notOk(existsSync(join(dir, 'expired')) || existsSync(join(dir, 'other')), 'no data directory was made');
  // A file that is not there: where to get one.
  const missing = start(nodeEnv(join(dir, 'missing'), { APL_TLS_CA: join(dir, 'nowhere', 'ca.pem'), APL_DEV_SETUP: 'false' }));
  t.equal(missing.status, 2, missing.stderr);
  t.equal(missing.stderr.trim(), `tls.ca (APL_TLS_CA): ${join(dir, 'nowhere', 'ca.pem')} cannot be read (ENOENT); put it there, or make development certificates: certs/dev-certs.sh ${join(dir, 'nowhere')} n1 (dev_setup: true makes them in the data directory)`,
    'naming its variable too, and the command with this node\'s id');
  t.notOk(existsSync(join(dir, 'missing')), 'no data directory was made');
  // With the development setup on, a file configured is not one it makes: the same refusal.
  const configured = start(nodeEnv(join(dir, 'configured'), { APL_TLS_CERT: join(dir, 'nowhere', 'n1.pem'), APL_DEV_SETUP: 'true' }));
  t.equal(configured.status, 2, configured.stderr);
  t.match(configured.stderr.trim(), new RegExp(`^tls\\.cert \\(APL_TLS_CERT\\): ${join(dir, 'nowhere', 'n1.pem')} cannot be read \\(ENOENT\\)`));
  t.notOk(existsSync(join(dir, 'configured')), 'no data directory was made');
});

t.test('a data directory a running node holds: refused before the development setup writes into it', async (t) => {
  const held = join(dir, 'held');
  const running = await spawnNode(nodeEnv(held));
  t.teardown(() => running.kill());
  const second = start(nodeEnv(held, { APL_DEV_SETUP: 'true', APL_NODE_ID: 'n9', APL_TLS_CA: undefined, APL_TLS_CERT: undefined, APL_TLS_KEY: undefined }));
  t.equal(second.status, 2, second.stderr);
  t.match(second.stderr, /the data directory .* is in use: another process holds its lock/);
  t.notOk(existsSync(join(held, 'certs', 'n9.pem')), 'no certificate was made in the directory it holds');
});

t.test('an APL_ variable that sets nothing is named when the node starts, with the one it is nearest to', async (t) => {
  const p = await spawnNode(nodeEnv(join(dir, 'typo'), { APL_LIMITS_BODY_BYTE_MAX: '1024' }));
  t.teardown(() => p.kill());
  let out = p.output();
  for (let waited = 0; !out.includes('ignored APL_') && waited < 5_000; waited += 50) {
    await new Promise((r) => setTimeout(r, 50));
    out = p.output();
  }
  t.match(out, /ignored APL_LIMITS_BODY_BYTE_MAX: no setting has that variable; did you mean APL_LIMITS_BODY_BYTES_MAX\?/);
  t.match(out, /"event":"unknown_variable","variable":"APL_LIMITS_BODY_BYTE_MAX"/);
});
