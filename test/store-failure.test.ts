// Proves that a replica whose state store fails stops safely instead of crashing: a
// write error injected through the store's database (as a full disk would raise it)
// leaves the process up; the intent applied in the batch that failed was answered (its
// entry is durable in the Raft log) and is there after a restart; new intents are
// answered 422 gateway_error; linearizable reads 503; /readyz says not ready and why;
// the clocks stop, so nothing more is proposed; and the failure is logged once. An
// export whose store read fails part-way is cut short, so that its client sees it end.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, type WrapDb } from '@apl/node';
import { AGENT_A, TOKENS, bootstrap, envelope, startTestNode, testCerts } from './support/node.js';

/** A store whose method `name` is `replace` of the real one (bound to the store); every other member as it is. */
function replacing(name: string, replace: (real: (...args: unknown[]) => unknown) => (...args: unknown[]) => unknown): WrapDb {
  return (db) => new Proxy(db, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      const real = (v as (...a: unknown[]) => unknown).bind(target);
      return prop === name ? replace(real) : real;
    },
  });
}

t.test('a state store that cannot write stops the replica safely, and the process stays up', async (t) => {
  let failing = false;
  let broken = false;
  // Once armed, the first batch that records an intent fails, and every batch after it.
  const wrap = replacing('batch', (batch) => (...args: unknown[]) => {
    const ops = args[0] as { key: string }[];
    if (failing && (broken || ops.some((o) => o.key.startsWith('txn/')))) {
      broken = true;
      return Promise.reject(new Error('IO error: No space left on device'));
    }
    return batch(...args);
  });
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({ write(chunk: Buffer, _e, cb) { for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>); cb(); } });
  const dir = mkdtempSync(join(tmpdir(), 'apl-store-failure-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const n = await startTestNode({ tick_interval_ms: 50 }, dir, createLogger('info', 'n1', sink), wrap);
  let acknowledged: { transaction: unknown } | null = null;
  let refused: { transaction: unknown } | null = null;
  try {
    await bootstrap(n);
    const att = await n.issuer.sign(AGENT_A);
    t.equal((await n.api('POST', '/api/v1/intents', { body: envelope(att) })).status, 200, 'the node works before the failure');
    failing = true;
    acknowledged = envelope(att) as { transaction: unknown };
    const applied = await n.api('POST', '/api/v1/intents', { body: acknowledged });
    t.equal(applied.status, 200, 'the intent is answered once applied: its entry is durable in the Raft log');
    t.equal(applied.body.verdict, 'Permitted');
    for (let i = 0; i < 200 && n.node.replica.failure === null; i++) await new Promise((r) => setTimeout(r, 10));
    t.match(n.node.replica.failure?.message, /No space left on device/, 'its batch failed, and the replica stopped');
    refused = envelope(att) as { transaction: unknown };
    const next = await n.api('POST', '/api/v1/intents', { body: refused });
    t.equal(next.status, 422);
    t.match(next.body, { error: 'gateway_error', message: /cannot write its state; nothing was recorded/ });
    const read = await n.api('GET', '/api/v1/policies/active', { token: att });
    t.equal(read.status, 503);
    t.equal(read.body.error, 'commit_unavailable');
    const ready = await n.agent.request('GET', '/readyz');
    t.equal(ready.status, 503);
    t.match(ready.body, { status: 'not ready', reason: /the replica stopped: IO error: No space left on device/ });
    const admin = await n.adm('operator', 'POST', '/admin/v1/parties', { id: 'party_after' });
    t.equal(admin.status, 422, 'admin writes are refused the same way');
    const last = n.node.replica.status().lastIndex;
    await new Promise((r) => setTimeout(r, 300));
    t.equal(n.node.replica.status().lastIndex, last, 'the clocks stopped: six tick intervals later nothing more was proposed');
    t.equal(lines.filter((l) => l.event === 'replica_failed').length, 1, 'the failure is logged once');
    t.equal((await n.agent.request('GET', '/healthz')).status, 200, 'the process is up and answers');
  } finally {
    await n.close();
  }
  // Restarted on a store that writes again, the node applies the acknowledged intent from the log.
  failing = false;
  broken = false;
  const again = await startTestNode({}, dir);
  try {
    const att = await n.issuer.sign(AGENT_A); // the issuer the store trusts
    const txn = (e: { transaction: unknown } | null) => `/api/v1/transactions/${String(e!.transaction)}`;
    const found = await again.api('GET', txn(acknowledged), { token: att });
    t.equal(found.status, 200, 'the acknowledged intent is there after the restart');
    t.match(found.body, { transaction: acknowledged!.transaction, verdict: 'Permitted', posted: true });
    t.equal((await again.api('GET', txn(refused), { token: att })).status, 404, 'the refused one is not');
  } finally {
    await again.close();
  }
});

t.test('an export whose store read fails part-way is cut short, not left open', async (t) => {
  let failAfter = Infinity;
  // The journal's reads: a corrupted block found after `failAfter` records.
  const wrap = replacing('values', (values) => (...args: unknown[]) => (async function* () {
    let n = 0;
    for await (const value of values(...args) as AsyncIterable<string>) {
      if (n++ >= failAfter) throw new Error('Corruption: corrupted compressed block contents');
      yield value;
    }
  })());
  const dir = mkdtempSync(join(tmpdir(), 'apl-export-failure-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const n = await startTestNode({}, dir, undefined, wrap);
  t.teardown(() => n.close());
  await bootstrap(n);
  failAfter = 3;
  const cut = await new Promise<string>((resolve) => {
    const req = httpsRequest(`${n.node.adminUrl}/admin/v1/log/export`, { ca: readFileSync(testCerts().ca), headers: { authorization: `Bearer ${TOKENS.operator}` } }, (res) => {
      let got = '';
      res.on('data', (c: Buffer) => (got += c.toString()));
      res.on('end', () => resolve(`ended whole after ${got.split('\n').length - 1} lines`));
      res.on('error', (err) => resolve(`cut: ${err.message} after ${got.split('\n').filter(Boolean).length} lines`));
      res.on('aborted', () => resolve(`cut after ${got.split('\n').filter(Boolean).length} lines`));
    });
    req.on('error', (err) => resolve(`cut: ${err.message}`));
    req.end();
    setTimeout(() => resolve('still open after 10 s'), 10_000).unref();
  });
  t.match(cut, /^cut/, `the client sees the export end short: ${cut}`);
});
