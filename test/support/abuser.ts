/**
 * The abusers of test/system/overload.test.ts, in a process of their own so that their work
 * never delays the measuring process's clock or sockets: one agent flooding the intent
 * route closed loop (`flood` requests in flight, ignoring Retry-After), and `lorises`
 * slow-loris connections that open TLS, start a request and trickle its headers one
 * byte every 100 ms, each replaced when the server closes it.
 *
 *   node abuser.js <spec as JSON>   (runs until stdin closes, then prints its figures as JSON)
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { connect } from 'node:tls';
import { Pool } from 'undici';

export interface AbuseSpec {
  agentUrl: string;
  ca: string;
  flood: number;
  lorises: number;
  /** the flooding agent's envelope; `transaction` gets a fresh suffix per request. */
  envelope: Record<string, unknown>;
}

export interface AbuseReport {
  flood: { sent: number; statuses: Record<string, number>; retryAfter: string[]; message: string };
  lorises: { closedAfterMs: number; answer: string }[];
}

const spec = JSON.parse(process.argv[2]!) as AbuseSpec;
const ca = readFileSync(spec.ca);
const url = new URL(spec.agentUrl);
let stop = false;
process.stdin.on('end', () => { stop = true; });
process.stdin.resume();

const report: AbuseReport = { flood: { sent: 0, statuses: {}, retryAfter: [], message: '' }, lorises: [] };
const pool = new Pool(spec.agentUrl, { connections: spec.flood, connect: { ca } });
let seq = 0;
const flooding = Promise.all(Array.from({ length: spec.flood }, async () => {
  while (!stop) {
    const body = JSON.stringify({ ...spec.envelope, transaction: `${String(spec.envelope.transaction)}_${++seq}` });
    const res = await pool.request({ method: 'POST', path: '/api/v1/intents', body, headers: { 'content-type': 'application/json' } });
    const text = await res.body.text();
    const f = report.flood;
    f.sent++;
    f.statuses[res.statusCode] = (f.statuses[res.statusCode] ?? 0) + 1;
    if (res.statusCode === 429) {
      const ra = String(res.headers['retry-after']);
      if (!f.retryAfter.includes(ra)) f.retryAfter.push(ra);
      f.message ||= text;
    }
  }
}));

function slowLoris(): Promise<{ closedAfterMs: number; answer: string }> {
  return new Promise((resolve) => {
    const opened = performance.now();
    let answer = '';
    let timer: NodeJS.Timeout | undefined;
    const socket = connect({ host: url.hostname, port: Number(url.port), ca, servername: 'localhost' }, () => {
      socket.write('POST /api/v1/intents HTTP/1.1\r\nHost: localhost\r\nX-Slow: ');
      timer = setInterval(() => socket.writable && socket.write('a'), 100);
    });
    socket.on('data', (d: Buffer) => { answer += d.toString('latin1'); });
    socket.on('error', () => undefined); // a reset is followed by 'close'
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ closedAfterMs: performance.now() - opened, answer });
    });
  });
}

const lorising = Promise.all(Array.from({ length: spec.lorises }, async () => {
  while (!stop) report.lorises.push(await slowLoris());
}));

await Promise.all([flooding, lorising]);
await pool.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
