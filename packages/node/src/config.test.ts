// Proves how a node's configuration is read: the defaults a newcomer meets, a file
// overridden key by key by APL_ variables, string settings taken as written, every
// invalid value refused with its key (and the variable that set it), and relative
// paths resolved against the file that holds them or, from a variable, against the
// working directory.
import t, { type Test } from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConfigError, envName, loadConfig, peerPortMismatch, tlsFiles, unknownVariables } from './config.js';
import { loadPrincipals } from './devsetup.js';

const dir = mkdtempSync(join(tmpdir(), 'apl-config-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** Writes a config file under the temp directory and returns its path. */
function file(name: string, content: unknown): string {
  const path = join(dir, name);
  mkdirSync(resolve(path, '..'), { recursive: true });
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

/** The message of the ConfigError `f` throws. */
function refusal(t: Test, f: () => unknown): string {
  try {
    f();
  } catch (err) {
    t.type(err, ConfigError, 'a ConfigError, not a crash');
    return (err as Error).message;
  }
  t.fail('the configuration was accepted');
  return '';
}

t.test('the defaults are the ones DESIGN §10 names', async (t) => {
  const c = loadConfig({ env: {} });
  t.match(c, {
    node_id: 'n1', host: '127.0.0.1', agent_port: 8443, admin_port: 9443, members: [],
    dev_setup: true, admin_tokens_file: null, admin_principals: [], audience: 'agent-plane-ledger',
    tick_interval_ms: 1000, commit_timeout_ms: 5000, log_level: 'info',
    tls: { ca: null, cert: null, key: null },
    limits: { body_bytes_max: 65536, entries_per_intent_max: 64, proposals_in_flight_max: 4096, attestation_cache_entries_max: 10000 },
  });
  t.equal(c.data_dir, resolve('.data/standalone'), 'the data directory is absolute, under the working directory');
  t.strictSame(tlsFiles(c), { ca: join(c.data_dir, 'certs/ca.pem'), cert: join(c.data_dir, 'certs/n1.pem'), key: join(c.data_dir, 'certs/n1-key.pem') });
});

t.test('every key has a variable named by its path', async (t) => {
  t.equal(envName(['agent_port']), 'APL_AGENT_PORT');
  t.equal(envName(['limits', 'body_bytes_max']), 'APL_LIMITS_BODY_BYTES_MAX');
  t.equal(envName(['raft', 'tick_ms']), 'APL_RAFT_TICK_MS');
});

t.test('a variable overrides the file, and the file overrides the default, key by key', async (t) => {
  const path = file('precedence.json', { agent_port: 1000, admin_port: 1001, audience: 'file-audience', limits: { body_bytes_max: 2048, entries_per_intent_max: 8 }, raft: { tick_ms: 80 } });
  const c = loadConfig({
    file: path,
    env: { APL_AGENT_PORT: '2000', APL_LIMITS_ENTRIES_PER_INTENT_MAX: '16', APL_DEV_SETUP: 'false', APL_MEMBERS: '[]', APL_TICK_INTERVAL_MS: ' 250 ' },
  });
  t.equal(c.agent_port, 2000, 'the variable wins over the file');
  t.equal(c.admin_port, 1001, 'the file wins over the default');
  t.equal(c.log_level, 'info', 'the default stands where neither speaks');
  t.equal(c.audience, 'file-audience');
  t.equal(c.limits.body_bytes_max, 2048, 'a nested key from the file');
  t.equal(c.limits.entries_per_intent_max, 16, 'a nested key from its variable; its sibling from the file is kept');
  t.equal(c.limits.proposals_in_flight_max, 4096);
  t.equal(c.raft.tick_ms, 80);
  t.equal(c.raft.election_ticks, 10);
  t.equal(c.dev_setup, false, 'a boolean variable');
  t.strictSame(c.members, [], 'a list variable holds JSON');
  t.equal(c.tick_interval_ms, 250, 'white space around a number is ignored');
});

t.test('a variable of a string setting is taken as written', async (t) => {
  const c = loadConfig({ env: { APL_NODE_ID: '7', APL_AUDIENCE: 'true', APL_HOST: '::1', APL_LOG_LEVEL: 'warn' } });
  t.equal(c.node_id, '7', 'a node named 7, not the number 7');
  t.equal(c.audience, 'true');
  t.equal(c.host, '::1');
  t.equal(c.log_level, 'warn');
});

t.test('an invalid value names its key, and the variable when a variable set it', async (t) => {
  t.equal(refusal(t, () => loadConfig({ env: { APL_AGENT_PORT: 'eighty' } })), 'invalid configuration: agent_port (APL_AGENT_PORT): must be a port number (0 to 65535)');
  t.equal(refusal(t, () => loadConfig({ env: { APL_ADMIN_PORT: '70000' } })), 'invalid configuration: admin_port (APL_ADMIN_PORT): must be a port number (0 to 65535)');
  t.equal(refusal(t, () => loadConfig({ env: { APL_LIMITS_BODY_BYTES_MAX: '0' } })),
    'invalid configuration: limits.body_bytes_max (APL_LIMITS_BODY_BYTES_MAX): must be an integer from 1 to 16777216');
  t.equal(refusal(t, () => loadConfig({ env: { APL_LOG_LEVEL: 'loud' } })).startsWith('invalid configuration: log_level (APL_LOG_LEVEL): '), true);
  t.equal(refusal(t, () => loadConfig({ env: { APL_MEMBERS: '[{"id":"N1","peer_addr":"a:1","agent_url":"https://a"}]' } })).startsWith('invalid configuration: members.0.id (APL_MEMBERS): '), true,
    'a problem inside a JSON variable names the variable');
  t.match(refusal(t, () => loadConfig({ env: { APL_MEMBERS: '[not json' } })), /^invalid configuration: members \(APL_MEMBERS\): must be a JSON array, and "\[not json" is not JSON \(.+\)$/);
  t.equal(refusal(t, () => loadConfig({ env: { APL_MEMBERS: '{}' } })), 'invalid configuration: members (APL_MEMBERS): must be an array', 'JSON that is no list is the schema\'s to refuse');

  const fromFile = file('invalid.json', { limits: { entries_per_intent_max: 1000 }, tick_interval_ms: 1.5 });
  t.equal(refusal(t, () => loadConfig({ file: fromFile, env: {} })),
    'invalid configuration: tick_interval_ms: must be a number of milliseconds from 1 to 3600000; limits.entries_per_intent_max: must be an integer from 1 to 256',
    'a value from the file names its key alone, and every problem is listed');
  const unknown = file('unknown.json', { agent_prot: 1 });
  t.equal(refusal(t, () => loadConfig({ file: unknown, env: {} })), 'invalid configuration: config: unknown field "agent_prot"');
  const section = file('section.json', { limits: 5 });
  t.equal(refusal(t, () => loadConfig({ file: section, env: { APL_LIMITS_BODY_BYTES_MAX: '1000' } })), 'invalid configuration: limits: must be an object',
    'a variable inside a section the file got wrong does not crash the loader');
});

t.test('an unreadable file is refused with its name', async (t) => {
  const missing = join(dir, 'missing.json');
  t.match(refusal(t, () => loadConfig({ file: missing, env: {} })), new RegExp(`^config file ${missing}: `));
  const notJson = file('broken.json', '{"agent_port": ');
  t.match(refusal(t, () => loadConfig({ file: notJson, env: {} })), new RegExp(`^config file ${notJson}: `));
  const list = file('list.json', '[]');
  t.equal(refusal(t, () => loadConfig({ file: list, env: {} })), `config file ${list}: must hold a JSON object`);
});

t.test('two listeners given one port are refused at start, naming both; port 0 may repeat', async (t) => {
  t.equal(refusal(t, () => loadConfig({ env: { APL_AGENT_PORT: '8500', APL_ADMIN_PORT: '8500' } })),
    'invalid configuration: agent_port (APL_AGENT_PORT) and admin_port (APL_ADMIN_PORT) are both 8500: each listener needs a port of its own');
  t.equal(refusal(t, () => loadConfig({ file: file('ports.json', { admin_port: 8443 }), env: {} })),
    'invalid configuration: agent_port and admin_port are both 8443: each listener needs a port of its own', 'a default counts too');
  const members = JSON.stringify([{ id: 'n1', peer_addr: '127.0.0.1:7443', agent_url: 'https://127.0.0.1:8443', admin_url: 'https://127.0.0.1:9443' }]);
  t.equal(refusal(t, () => loadConfig({ env: { APL_PEER_PORT: '9443', APL_MEMBERS: members } })),
    'invalid configuration: admin_port and peer_port (APL_PEER_PORT) are both 9443: each listener needs a port of its own');
  t.equal(loadConfig({ env: { APL_PEER_PORT: '9443' } }).peer_port, 9443, 'the peer port is not listened on without members');
  t.equal(loadConfig({ env: { APL_AGENT_PORT: '0', APL_ADMIN_PORT: '0' } }).agent_port, 0);
});

t.test('relative paths in a file resolve against the file\'s directory', async (t) => {
  const path = file('deploy/n1.json', {
    data_dir: 'data/n1', admin_tokens_file: '../secrets/tokens.json',
    tls: { ca: 'certs/ca.pem', cert: 'certs/n1.pem', key: '/etc/apl/n1-key.pem' },
  });
  const base = join(dir, 'deploy');
  const c = loadConfig({ file: path, env: {} });
  t.equal(c.data_dir, join(base, 'data/n1'));
  t.equal(c.admin_tokens_file, join(dir, 'secrets/tokens.json'));
  t.strictSame(c.tls, { ca: join(base, 'certs/ca.pem'), cert: join(base, 'certs/n1.pem'), key: '/etc/apl/n1-key.pem' }, 'an absolute path stays as it is');
  t.strictSame(tlsFiles(c), c.tls);
});

t.test('relative paths from a variable resolve against the working directory, file or not', async (t) => {
  const path = file('deploy/n2.json', { data_dir: 'data/n2', tls: { ca: 'certs/ca.pem' } });
  const c = loadConfig({ file: path, env: { APL_DATA_DIR: 'override/data', APL_TLS_CERT: 'my/n2.pem', APL_ADMIN_TOKENS_FILE: 'tokens.json' } });
  t.equal(c.data_dir, resolve('override/data'));
  t.equal(c.tls.cert, resolve('my/n2.pem'));
  t.equal(c.admin_tokens_file, resolve('tokens.json'));
  t.equal(c.tls.ca, join(dir, 'deploy/certs/ca.pem'), 'the file\'s own path still resolves against the file');
  const bare = loadConfig({ env: { APL_DATA_DIR: 'rel/data', APL_TLS_KEY: 'k.pem' } });
  t.equal(bare.data_dir, resolve('rel/data'));
  t.equal(bare.tls.key, resolve('k.pem'));
});

t.test('admin principals: a name configured twice, or one token for two principals, is refused at start', async (t) => {
  const hash = 'a'.repeat(64);
  const principals = (list: { name: string; roles: string[]; token_sha256: string }[]) => loadConfig({ env: { APL_ADMIN_PRINCIPALS: JSON.stringify(list), APL_DATA_DIR: join(dir, 'principals') } });
  const twoNames = principals([{ name: 'x', roles: ['author'], token_sha256: hash }, { name: 'y', roles: ['reviewer'], token_sha256: hash }]);
  t.equal(refusal(t, () => loadPrincipals(twoNames)), `admin principals x and y have the same token (token_sha256 ${hash}); give each its own`);
  const twice = principals([{ name: 'x', roles: ['author'], token_sha256: hash }, { name: 'x', roles: ['reviewer'], token_sha256: 'b'.repeat(64) }]);
  t.equal(refusal(t, () => loadPrincipals(twice)), 'admin principal x is configured twice');
  const fine = principals([{ name: 'x', roles: ['author'], token_sha256: hash }, { name: 'y', roles: ['reviewer'], token_sha256: 'b'.repeat(64) }]);
  t.same(loadPrincipals(fine).map((p) => p.name), ['x', 'y']);
});

t.test('an APL_ variable that sets nothing is found, with the setting it is nearest to', async (t) => {
  t.same(unknownVariables({ APL_LIMITS_BODY_BYTE_MAX: '1', APL_AGENT_PORT: '1', APL_ATTESTATION: 'x', APL_WHATEVER_ELSE: '1', PATH: '/bin' }), [
    { name: 'APL_LIMITS_BODY_BYTE_MAX', nearest: 'APL_LIMITS_BODY_BYTES_MAX' },
    { name: 'APL_WHATEVER_ELSE', nearest: null },
  ], 'settings and apl\'s own variables are not reported');
});

t.test('an admin tokens file named in the configuration must exist', async (t) => {
  const missing = join(dir, 'no-such-tokens.json');
  const c = loadConfig({ env: { APL_ADMIN_TOKENS_FILE: missing, APL_DATA_DIR: join(dir, 'tokens') } });
  t.equal(refusal(t, () => loadPrincipals(c)), `admin_tokens_file: ${missing} does not exist`);
});

t.test('a list setting given by a variable that is not JSON says so, naming the variable', async (t) => {
  t.equal(refusal(t, () => loadConfig({ env: { APL_MEMBERS: 'notjson' } })), 'invalid configuration: members (APL_MEMBERS): must be a JSON array, and "notjson" is not JSON (Unexpected token \'o\', "notjson" is not valid JSON)');
  t.match(refusal(t, () => loadConfig({ env: { APL_ADMIN_PRINCIPALS: '[{"name":' } })), /^invalid configuration: admin_principals \(APL_ADMIN_PRINCIPALS\): must be a JSON array, and "\[\{\\"name\\":" is not JSON/);
});

t.test('a member whose own peer address names another port than peer_port is warned of; one that agrees, or a standalone node, is not', async (t) => {
  const members = (self: string) => JSON.stringify(['n1', 'n2', 'n3'].map((id, k) => ({ id, peer_addr: id === 'n1' ? self : `127.0.0.1:${7444 + k}`, agent_url: `https://127.0.0.1:${8443 + k}` })));
  const at = (peerAddr: string, port: string) => loadConfig({ env: { APL_MEMBERS: members(peerAddr), APL_PEER_PORT: port, APL_DEV_SETUP: 'false' } });
  t.same(peerPortMismatch(at('127.0.0.1:23122', '23199')), {
    peer_addr: '127.0.0.1:23122', peer_port: 23199,
    message: 'members names n1\'s peer address 127.0.0.1:23122, but its peer mesh listens on peer_port 23199 (APL_PEER_PORT): the other members dial 127.0.0.1:23122, which is right only if that port is forwarded here',
  });
  t.equal(peerPortMismatch(at('n1:7443', '7443')), null, 'the same port under a host name');
  t.equal(peerPortMismatch(loadConfig({ env: { APL_PEER_PORT: '23199', APL_DEV_SETUP: 'false' } })), null, 'a standalone node runs no peer mesh');
});
