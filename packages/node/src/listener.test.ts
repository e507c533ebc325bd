// Proves how a listener closes: an answer still being written when it closes closes
// its connection (Connection: close), so that a client kept alive cannot send another
// request on it; and a connection still open after the grace period is cut. And that
// what a listener refuses before a request reaches its plane is answered and told; and
// that one client address holds at most its share of a listener's connections; and
// that loading the node loads no part of Node.js's fetch.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { connect, type ConnectionOptions, type TLSSocket } from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CERT_SCRIPT } from './devsetup.js';
import { closeListener, limitedServer, listen, listenerUrl, sourceAddress } from './listener.js';

const dir = mkdtempSync(join(tmpdir(), 'apl-listener-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
execFileSync('bash', [CERT_SCRIPT, dir, 'n1'], { stdio: 'ignore' });
const tls = { cert: readFileSync(join(dir, 'n1.pem')), key: readFileSync(join(dir, 'n1-key.pem')) };
const ca = readFileSync(join(dir, 'ca.pem'));
const http = { headers_timeout_ms: 2000, request_timeout_ms: 5000, keep_alive_timeout_ms: 5000, connections_max: 16, connections_per_source_max: 16, write_stall_ms: 60_000 };

t.test('an answer written after the listener began to close closes its connection', async (t) => {
  let release: () => void = () => undefined;
  const held = new Promise<void>((r) => (release = r));
  const server = limitedServer(tls, http);
  server.on('request', (req, res) => {
    if (req.url === '/hold') void held.then(() => res.end('late'));
    else res.end('ok');
  });
  await listen(server, 0, '127.0.0.1', () => undefined);
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const agent = new Agent({ ca, keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const get = (path: string) => new Promise<{ connection: string | undefined; body: string }>((resolve, reject) => {
    request(`${url}${path}`, { agent }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ connection: res.headers.connection, body }));
    }).on('error', reject).end();
  });
  t.equal((await get('/now')).connection, 'keep-alive', 'before, connections are kept alive');
  const late = get('/hold');
  await new Promise((r) => setTimeout(r, 100));
  const closed = closeListener(server, 5_000);
  release();
  t.same(await late, { connection: 'close', body: 'late' }, 'answered, and its connection closed');
  await closed;
});

t.test('a connection still open after the grace period is cut', async (t) => {
  const server = limitedServer(tls, http);
  server.on('request', () => undefined); // never answers
  await listen(server, 0, '127.0.0.1', () => undefined);
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const agent = new Agent({ ca });
  t.teardown(() => agent.destroy());
  const cut = new Promise<string>((resolve) => {
    request(`${url}/never`, { agent }, () => resolve('answered')).on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message)).end();
  });
  await new Promise((r) => setTimeout(r, 100));
  await closeListener(server, 200);
  t.equal(await cut, 'ECONNRESET', 'the request never answered is cut once the grace is over');
});

t.test('a request Node.js cannot read, or one with an unsupported Expect, is answered and told as refused', async (t) => {
  const reasons: string[] = [];
  const server = limitedServer(tls, http);
  server.on('request', (_req, res) => res.end('ok'));
  await listen(server, 0, '127.0.0.1', (reason) => reasons.push(reason));
  t.teardown(() => closeListener(server, 100));
  const port = (server.address() as AddressInfo).port;
  const raw = (text: string) => new Promise<string>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => s.end(text));
    let answer = '';
    s.on('data', (c: Buffer) => (answer += c.toString()));
    s.on('close', () => resolve(answer));
    s.on('error', reject);
  });
  t.match(await raw('NOT HTTP AT ALL\r\n\r\n'), /^HTTP\/1\.1 400 [^]*"error":"malformed_request"/);
  t.match(await raw('GET / HTTP/1.1\r\nHost: localhost\r\nExpect: later\r\nContent-Length: 0\r\n\r\n'), /^HTTP\/1\.1 417 [^]*"error":"expectation_failed"/);
  t.match(await raw('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 200 /, 'a request it can read reaches the plane');
  t.same(reasons, ['malformed_request', 'expectation_failed']);
});

t.test('a connection answered 408 or 400 is closed by the listener, whether or not its client closes its side', async (t) => {
  const server = limitedServer(tls, { ...http, headers_timeout_ms: 500, request_timeout_ms: 1000, connections_max: 4 });
  server.on('request', (_req, res) => res.end('ok'));
  await listen(server, 0, '127.0.0.1', () => undefined);
  t.teardown(() => closeListener(server, 100));
  const port = (server.address() as AddressInfo).port;
  const kept: TLSSocket[] = [];
  t.teardown(() => kept.forEach((s) => s.destroy()));
  /** Sends `text` and never ends its own side; resolves with the answer once the listener has ended the connection. */
  const stubborn = (text: string) => new Promise<string>((resolve, reject) => {
    // allowHalfOpen (a net.Socket option tls.connect passes on; its type leaves it out): this side stays open after the listener's end.
    const s = connect({ host: '127.0.0.1', port, ca, servername: 'localhost', allowHalfOpen: true } as ConnectionOptions, () => s.write(text));
    kept.push(s);
    let answer = '';
    s.on('data', (c: Buffer) => (answer += c.toString()));
    s.on('end', () => resolve(answer));
    s.on('error', reject);
  });
  const answers = await Promise.all([
    stubborn('GET / HTTP/1.1\r\nHost: localhost\r\n'), // headers never finished
    stubborn('NOT HTTP AT ALL\r\n\r\n'),
    stubborn('GET / HTTP/1.1\r\nHost: localhost\r\n'),
    stubborn('GET / HTTP/1.1\r\nHost: localhost\r\n'),
  ]);
  t.match(answers, [/^HTTP\/1\.1 408 /, /^HTTP\/1\.1 400 /, /^HTTP\/1\.1 408 /, /^HTTP\/1\.1 408 /], 'each was answered, and its connection ended');
  const open = () => new Promise<number>((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
  for (let k = 0; k < 100 && (await open()) > 0; k++) await new Promise((r) => setTimeout(r, 100));
  t.equal(await open(), 0, 'the listener holds none of them, though their clients keep them open');
  const ok = await new Promise<string>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => s.end('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'));
    let answer = '';
    s.on('data', (c: Buffer) => (answer += c.toString()));
    s.on('close', () => resolve(answer));
    s.on('error', reject);
  });
  t.match(ok, /^HTTP\/1\.1 200 /, 'their places in connections_max are free: a new connection is served');
});

t.test('a listener bound to every interface is named by the address its configuration advertises', async (t) => {
  // A server object alone: tests bind 127.0.0.1 only, and the name is worked out from the address.
  const bound = (port: number) => ({ address: () => ({ port }) }) as unknown as Server;
  t.equal(listenerUrl('127.0.0.1', bound(8443), 'https://n1.example:8443'), 'https://127.0.0.1:8443', 'a host bound is a host clients reach');
  t.equal(listenerUrl('::1', bound(8443)), 'https://[::1]:8443');
  t.equal(listenerUrl('0.0.0.0', bound(8443), 'https://localhost:8443'), 'https://localhost:8443', 'a container\'s wildcard: the advertised address');
  t.equal(listenerUrl('::', bound(9443), undefined), 'https://localhost:9443', 'with none advertised, localhost at the port bound');
});

t.test('one client address holds at most http.connections_per_source_max connections of a listener', async (t) => {
  const reasons: string[] = [];
  const server = limitedServer(tls, { ...http, connections_per_source_max: 4 });
  server.on('request', (_req, res) => res.end('ok'));
  await listen(server, 0, '127.0.0.1', (reason) => reasons.push(reason));
  t.teardown(() => closeListener(server, 100));
  const port = (server.address() as AddressInfo).port;
  // A TLS connection that completes its handshake resolves open; one the listener closes resolves closed.
  const open = () => new Promise<{ s: ReturnType<typeof connect>; ok: boolean }>((resolve) => {
    const s = connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => resolve({ s, ok: true }));
    s.on('error', () => resolve({ s, ok: false }));
    s.on('close', () => resolve({ s, ok: false }));
  });
  const first = [];
  for (let k = 0; k < 4; k++) first.push(await open());
  t.same(first.map((c) => c.ok), [true, true, true, true], 'the first four connections are taken');
  const beyond = await Promise.all([open(), open(), open()]);
  t.same(beyond.map((c) => c.ok), [false, false, false], 'three more from the same address are closed as they are accepted');
  t.same(reasons, ['connections_per_source', 'connections_per_source', 'connections_per_source'], 'and told as refused for their source');
  t.same(first.map((c) => !c.s.destroyed), [true, true, true, true], 'the four it holds stay open');
  first[0]!.s.destroy();
  await new Promise((r) => setTimeout(r, 100));
  const again = await open();
  t.ok(again.ok, 'a place freed by a closed connection is taken again');
  again.s.end('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
  const answer = await new Promise<string>((resolve) => {
    let text = '';
    again.s.on('data', (c: Buffer) => (text += c.toString()));
    again.s.on('close', () => resolve(text));
  });
  t.match(answer, /^HTTP\/1\.1 200 /, 'and served');
  for (const c of first) c.s.destroy();
});

t.test('a connection is counted under its client address, an IPv4 one seen through a dual-stack socket as IPv4', async (t) => {
  t.equal(sourceAddress('::ffff:10.0.0.7'), '10.0.0.7');
  t.equal(sourceAddress('::FFFF:10.0.0.7'), '10.0.0.7');
  t.equal(sourceAddress('10.0.0.7'), '10.0.0.7');
  t.equal(sourceAddress('2001:db8::ffff:1'), '2001:db8::ffff:1', 'an IPv6 address is itself');
  t.equal(sourceAddress('::ffff:a00:7'), '::ffff:a00:7', 'a mapped address written in hex is left as it is');
  t.equal(sourceAddress(undefined), '', 'a socket already closed has no address');
});

t.test('a client that asks for HTTP/1.0 by ALPN is served in HTTP/1.0', async (t) => {
  const server = limitedServer(tls, http);
  server.on('request', (_req, res) => res.end('ok'));
  await listen(server, 0, '127.0.0.1', () => undefined);
  t.teardown(() => closeListener(server, 100));
  const port = (server.address() as AddressInfo).port;
  for (const offered of [['http/1.0'], ['h2', 'http/1.1']]) {
    const { protocol, answer } = await new Promise<{ protocol: string | false | null; answer: string }>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port, ca, servername: 'localhost', ALPNProtocols: offered }, () => {
        const protocol = s.alpnProtocol ?? null;
        s.end(protocol === 'http/1.0' ? 'GET / HTTP/1.0\r\n\r\n' : 'GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
        let answer = '';
        s.on('data', (c: Buffer) => (answer += c.toString()));
        s.on('close', () => resolve({ protocol, answer }));
      });
      s.on('error', reject);
    });
    t.equal(protocol, offered.includes('http/1.0') ? 'http/1.0' : 'http/1.1', `offered ${offered.join(', ')}`);
    t.match(answer, /^HTTP\/1\.[01] 200 /, 'and answered');
  }
});

t.test('loading the node loads no part of Node.js\'s fetch (an ES import of node:http would, about 50 ms on each thread)', async (t) => {
  // The compiled package, as a node process loads it, in a process of its own without tap's hooks.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_OPTIONS' && !k.startsWith('_TAPJS')));
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', "await import('@apl/node'); console.log(JSON.stringify(process.moduleLoadList.filter((m) => m.includes('undici'))))"], {
    cwd: fileURLToPath(new URL('../../..', import.meta.url)), env, encoding: 'utf8',
  });
  t.same(JSON.parse(out), []);
});

