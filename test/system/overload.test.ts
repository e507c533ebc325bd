// Proves that a standalone node holds up against abuse, with a live node in its own
// process: slow-loris clients (connections that trickle their headers and never end
// them) and one agent flooding the intent route do not slow the other agents' p99 by
// more than twice (measured alone and under abuse, in alternating rounds of the same
// run, with a floor for a noisy machine, and measured again before a slowdown counts);
// the flooding agent is answered 429 rate_limited with Retry-After;
// the slow-loris connections are closed by the headers timeout (408); the
// listener's connection cap closes the connections beyond it; and connections that
// never finish the TLS handshake are dropped at that timeout, freeing their places.
import t from 'tap';
import { spawn } from 'node:child_process';
import { setPriority } from 'node:os';
import { connect, type TLSSocket } from 'node:tls';
import { connect as tcpConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { percentile } from '../bench/support/percentile.js';
import { startBenchServer } from '../bench/support/server.js';
import { bootstrapWorkload, type AgentFixture } from '../bench/support/workload.js';
import type { AbuseReport, AbuseSpec } from '../support/abuser.js';
import { REPO } from '../support/process.js';

/** The compiled abuser (npm test builds before it tests). */
const ABUSER = join(REPO, 'test/dist/support/abuser.js');

t.setTimeout(300_000);

const HEADERS_TIMEOUT_MS = 1000;
const CONNECTIONS_MAX = 200;
const RATE = 50;
/** The flooding agent's connections, each sending its next request as soon as it is answered. */
const FLOOD = 32;
const REFUSAL_DELAY_MS = 500;
/** Requests per measured phase of the well-behaved agents, sent open loop. */
const SAMPLES = 400;
const ROUNDS = 3;
const INTERVAL_MS = 10;
/** A p99 below this counts as this: a few milliseconds of noise on a shared machine is not a slowdown. */
const P99_FLOOR_MS = 15;

const server = await startBenchServer({
  env: {
    APL_HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
    APL_HTTP_CONNECTIONS_MAX: String(CONNECTIONS_MAX),
    APL_RATE_LIMIT_AGENT_INTENTS_PER_SECOND: String(RATE),
    APL_RATE_LIMIT_AGENT_BURST: String(RATE),
    APL_RATE_LIMIT_REFUSAL_DELAY_MS: String(REFUSAL_DELAY_MS),
    APL_LOG_LEVEL: 'info',
  },
});
t.teardown(() => server.stop());
const ca = readFileSync(server.ca);
const url = new URL(server.proc.agentUrl);
const runId = `o${Date.now().toString(36)}`;
const fixtures = await bootstrapWorkload(server.admin, 5, runId);
const [flooder, ...good] = fixtures.agents as [AgentFixture, ...AgentFixture[]];

let seq = 0;
/** A usage record of `agent`: permitted by the policy, and it posts. */
function intent(agent: AgentFixture): string {
  const move = { usage: agent.usage, amount: { minor: 1, currency: 'USD' } };
  return JSON.stringify({
    agent: agent.uri, attestation: agent.attestation, transaction: `txn_${runId}_${++seq}`, entries: [],
    consume_usage: move, meter_usage: move, bill_usage: move, action: { action: 'usage.record', bindings: {} },
    evidence: [], justification: 'overload test', policy: fixtures.policy,
  });
}

const post = async (pool: Pool, body: string) => {
  const res = await pool.request({ method: 'POST', path: '/api/v1/intents', body, headers: { 'content-type': 'application/json' } });
  const text = await res.body.text();
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], text };
};

/**
 * The well-behaved agents: SAMPLES intents, one every INTERVAL_MS (open loop, so a
 * slow answer does not slow the sending), in turn from four agents, each at half its
 * rate; returns the latencies, sorted, and fails on any answer but 200.
 */
async function wellBehaved(pool: Pool): Promise<Float64Array> {
  const ms: number[] = [];
  const sent: Promise<void>[] = [];
  const start = performance.now();
  for (let k = 0; k < SAMPLES; k++) {
    const due = start + k * INTERVAL_MS;
    const now = performance.now();
    if (due > now) await new Promise((r) => setTimeout(r, due - now));
    const body = intent(good[k % good.length]!);
    sent.push((async () => {
      const t0 = performance.now();
      const r = await post(pool, body);
      if (r.status !== 200) throw new Error(`a well-behaved agent was answered ${r.status}: ${r.text}`);
      ms.push(performance.now() - t0);
    })());
  }
  await Promise.all(sent);
  return Float64Array.from(ms).sort();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Starts the abusers in their own process (support/abuser.ts); `stop` ends them and resolves with their figures. */
function abuse(spec: AbuseSpec): { stop: () => Promise<AbuseReport> } {
  const child = spawn(process.execPath, [ABUSER, JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'inherit'] });
  // The abusers run at the lowest priority: on a real deployment their CPU is on other
  // machines, and here it must not take the cores the node and the measuring need.
  setPriority(child.pid!, 19);
  let out = '';
  child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    stop: async () => {
      child.stdin.end();
      await exited;
      return JSON.parse(out) as AbuseReport;
    },
  };
}

/** How many times the rounds are measured before the bound counts as broken. */
const ATTEMPTS = 3;

interface Attempt {
  alone: number[];
  abused: number[];
  reports: AbuseReport[];
  /** how long each round's abusers ran, in seconds. */
  abusedSeconds: number[];
  /** the median p99 under abuse over the median p99 alone (floored at P99_FLOOR_MS). */
  ratio: number;
}

/**
 * ROUNDS rounds that alternate, alone then under abuse, so that a burst of load from
 * elsewhere on a shared machine falls on both alike; the p99s compared are the medians
 * of the rounds'.
 */
async function measure(goodPool: Pool): Promise<Attempt> {
  const a: Attempt = { alone: [], abused: [], reports: [], abusedSeconds: [], ratio: NaN };
  for (let round = 0; round < ROUNDS; round++) {
    a.alone.push(percentile(await wellBehaved(goodPool), 99));
    const started = performance.now();
    const abusers = abuse({
      agentUrl: server.proc.agentUrl, ca: server.ca, flood: FLOOD, lorises: 40,
      envelope: JSON.parse(intent(flooder)) as Record<string, unknown>,
    });
    await new Promise((r) => setTimeout(r, 500));
    a.abused.push(percentile(await wellBehaved(goodPool), 99));
    a.reports.push(await abusers.stop());
    a.abusedSeconds.push((performance.now() - started) / 1000);
  }
  a.ratio = median(a.abused) / Math.max(median(a.alone), P99_FLOOR_MS);
  return a;
}

t.test('abuse does not slow the other agents, the flooder gets 429, slow-loris connections are closed', async (t) => {
  const goodPool = new Pool(server.proc.agentUrl, { connections: 8, connect: { ca } });
  try {
    const timedOutBefore = await refused('request_timeout');
    await wellBehaved(goodPool); // warm-up: JIT, caches, connections
    // A slowdown the abuse causes shows in every attempt; a burst of other work on a
    // shared machine (tap runs other files beside this one) does not, so the bound
    // holds when one attempt of ATTEMPTS keeps it.
    const attempts: Attempt[] = [];
    do attempts.push(await measure(goodPool));
    while (attempts.length < ATTEMPTS && attempts[attempts.length - 1]!.ratio > 2);
    const reports = attempts.flatMap((a) => a.reports);
    const flood = { sent: 0, statuses: {} as Record<string, number>, retryAfter: [] as string[], message: reports[0]!.flood.message };
    for (const r of reports) {
      flood.sent += r.flood.sent;
      for (const [k, v] of Object.entries(r.flood.statuses)) flood.statuses[k] = (flood.statuses[k] ?? 0) + v;
      flood.retryAfter.push(...r.flood.retryAfter);
    }
    const closed = reports.flatMap((r) => r.lorises);
    for (const [k, a] of attempts.entries()) {
      t.comment(`attempt ${k + 1}: well-behaved p99 by round, alone ${a.alone.map((x) => x.toFixed(1)).join(' ')} ms, under abuse ${a.abused.map((x) => x.toFixed(1)).join(' ')} ms: `
        + `median ${median(a.abused).toFixed(1)} ms against ${median(a.alone).toFixed(1)} ms (${a.ratio.toFixed(2)}x, with a floor of ${P99_FLOOR_MS} ms)`);
    }
    t.comment(`flood ${flood.sent} requests ${JSON.stringify(flood.statuses)}; ${closed.length} slow-loris connections`);
    const best = Math.min(...attempts.map((a) => a.ratio));
    t.ok(best <= 2, `abuse slows a well-behaved agent's p99 by at most 2x (${best.toFixed(2)}x in the best of ${attempts.length} attempts)`);

    // Each round the bucket starts full (RATE tokens), then refills at RATE a second.
    const seconds = attempts.flatMap((a) => a.abusedSeconds);
    const share = seconds.reduce((n, s) => n + RATE + RATE * s, 0);
    t.ok((flood.statuses[429] ?? 0) > 0, 'the flooding agent is refused');
    t.ok((flood.statuses[200] ?? 0) > 0 && flood.statuses[200]! <= share, `but not shut out: its share goes through, and no more (${flood.statuses[200]} recorded, at most ${Math.floor(share)})`);
    // A held refusal frees its connection after REFUSAL_DELAY_MS: the flood can send at
    // most its share plus one request per connection per delay (and one more each at the end).
    const sendable = share + seconds.reduce((n, s) => n + FLOOD * (s * 1000 / REFUSAL_DELAY_MS + 1), 0);
    t.ok(flood.sent <= sendable, `refusals are held, so ignoring Retry-After does not let the flood send more (${flood.sent} sent, at most ${Math.floor(sendable)})`);
    t.ok(flood.retryAfter.length > 0 && flood.retryAfter.every((v) => /^[1-9][0-9]*$/.test(v)), `every 429 says Retry-After in whole seconds (${flood.retryAfter.join(', ')})`);
    t.match(JSON.parse(flood.message), { error: 'rate_limited', message: /faster than this node accepts from one agent \(50 a second, bursts of 50\); nothing was recorded/ });
    t.same(Object.keys(flood.statuses).filter((s) => s !== '200' && s !== '429'), [], 'the flood is answered 200 or 429, nothing else');

    const late = closed.filter((c) => c.closedAfterMs > HEADERS_TIMEOUT_MS * 5);
    t.same(late.map((c) => Math.round(c.closedAfterMs)), [], `every slow-loris connection is closed within 5x the headers timeout of ${HEADERS_TIMEOUT_MS} ms`);
    const answered = closed.filter((c) => c.answer !== '');
    t.ok(answered.length > 0 && answered.every((c) => c.answer.startsWith('HTTP/1.1 408 ') && c.answer.includes('"error":"request_timeout"')),
      `those answered got 408 request_timeout (${answered.length} of ${closed.length})`);
    t.ok(closed.every((c) => c.closedAfterMs >= HEADERS_TIMEOUT_MS * 0.9), 'and none before its time');
    const timedOut = (await refused('request_timeout')) - timedOutBefore;
    t.ok(timedOut >= answered.length, `the metrics count them (${timedOut} request_timeout, ${answered.length} answered 408)`);
  } finally {
    await goodPool.close();
  }
});

t.test('the connection cap closes the connections beyond it, and frees the places when they go', async (t) => {
  const open = (): Promise<TLSSocket | null> => new Promise((resolve) => {
    const s = connect({ host: url.hostname, port: Number(url.port), ca, servername: 'localhost' }, () => resolve(s));
    s.on('error', () => resolve(null));
    s.on('close', () => resolve(null));
  });
  const droppedBefore = await refused('connections_max');
  const sockets = await Promise.all(Array.from({ length: CONNECTIONS_MAX + 20 }, open));
  const held = sockets.filter((s): s is TLSSocket => s !== null && !s.destroyed);
  // Give the server a moment to drop what it refused after the handshake raced it.
  await new Promise((r) => setTimeout(r, 200));
  const still = held.filter((s) => !s.destroyed);
  t.ok(still.length <= CONNECTIONS_MAX, `${still.length} connections open, at most ${CONNECTIONS_MAX}`);
  t.ok(still.length >= CONNECTIONS_MAX - 5, `and the cap is what limits them (${still.length})`);
  const dropped = (await refused('connections_max')) - droppedBefore;
  t.ok(dropped >= CONNECTIONS_MAX + 20 - held.length && dropped >= 15, `the metrics count the connections dropped at the cap (${dropped}; ${CONNECTIONS_MAX + 20 - held.length} never opened)`);
  for (const s of held) s.destroy();
  await new Promise((r) => setTimeout(r, 300));
  t.equal(await statusOnNewConnection(), 200, 'once they are gone a new connection is served');
});

t.test('connections that never finish the TLS handshake are dropped at the headers timeout and free their places', async (t) => {
  const before = await refused('tls_handshake');
  // As many bare TCP connections as the cap allows, sending nothing: no handshake ever.
  const sockets = await Promise.all(Array.from({ length: CONNECTIONS_MAX }, () => new Promise<{ s: Socket; closed: Promise<void> }>((resolve) => {
    const s = tcpConnect(Number(url.port), url.hostname, () => resolve({ s, closed: new Promise((done) => s.once('close', () => done())) }));
    s.on('error', () => undefined);
  })));
  const dropped = await Promise.race([
    Promise.all(sockets.map((x) => x.closed)).then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), HEADERS_TIMEOUT_MS * 5)),
  ]);
  t.ok(dropped, `the server closed every one within ${HEADERS_TIMEOUT_MS * 5} ms (its headers timeout is ${HEADERS_TIMEOUT_MS} ms)`);
  t.equal((await refused('tls_handshake')) - before, CONNECTIONS_MAX, 'and the metrics count each as a TLS handshake not finished');
  for (const { s } of sockets) s.destroy();
  await new Promise((r) => setTimeout(r, 300));
  t.equal(await statusOnNewConnection(), 200, 'and a new connection is served: their places were freed');
});

/** apl_http_connections_refused_total of the agent plane for one reason, read from the node's /metrics. */
async function refused(reason: string): Promise<number> {
  const pool = new Pool(server.proc.adminUrl, { connections: 1, connect: { ca } });
  try {
    const res = await pool.request({ method: 'GET', path: '/metrics' });
    const text = await res.body.text();
    const line = text.split('\n').find((l) => l.startsWith('apl_http_connections_refused_total{') && l.includes('plane="agent"') && l.includes(`reason="${reason}"`));
    if (line === undefined) throw new Error(`no apl_http_connections_refused_total for the agent plane and ${reason} in /metrics`);
    return Number(line.slice(line.lastIndexOf(' ') + 1));
  } finally {
    await pool.close();
  }
}

/** The status of a well-behaved agent's intent sent on a connection of its own. */
async function statusOnNewConnection(): Promise<number> {
  const pool = new Pool(server.proc.agentUrl, { connections: 1, connect: { ca } });
  try {
    return (await post(pool, intent(good[0]!))).status;
  } finally {
    await pool.close();
  }
}
