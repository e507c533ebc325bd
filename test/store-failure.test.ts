// Proves that a replica whose state store fails stops safely instead of crashing: a
// write error injected through the store's database (as a full disk would raise it)
// leaves the process up; the intent whose batch failed is answered 503
// commit_unavailable (its entry is in the log); new intents are answered 422
// gateway_error; linearizable reads 503; /readyz says not ready and why; the clocks
// stop, so nothing more is proposed; and the failure is logged once.
import t from 'tap';
import { Writable } from 'node:stream';
import { createLogger, type WrapDb } from '@apl/node';
import { AGENT_A, bootstrap, envelope, startTestNode } from './support/node.js';

t.test('a state store that cannot write stops the replica safely, and the process stays up', async (t) => {
  let failing = false;
  let broken = false;
  const wrap: WrapDb = (db) => new Proxy(db, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      if (prop !== 'batch') return (v as (...a: unknown[]) => unknown).bind(target);
      // Once armed, the first batch that records an intent fails, and every batch after it.
      return (...args: unknown[]) => {
        const ops = args[0] as { key: string }[];
        if (failing && (broken || ops.some((o) => o.key.startsWith('txn/')))) {
          broken = true;
          return Promise.reject(new Error('IO error: No space left on device'));
        }
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({ write(chunk: Buffer, _e, cb) { for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>); cb(); } });
  const n = await startTestNode({ tick_interval_ms: 50 }, undefined, createLogger('info', 'n1', sink), wrap);
  try {
    await bootstrap(n);
    const att = await n.issuer.sign(AGENT_A);
    t.equal((await n.api('POST', '/api/v1/intents', { body: envelope(att) })).status, 200, 'the node works before the failure');
    failing = true;
    const inflight = await n.api('POST', '/api/v1/intents', { body: envelope(att) });
    t.equal(inflight.status, 503);
    t.match(inflight.body, { error: 'commit_unavailable', message: /may or may not have been recorded/ });
    const next = await n.api('POST', '/api/v1/intents', { body: envelope(att) });
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
});
