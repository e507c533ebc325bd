import t from 'tap';
import { Writable } from 'node:stream';
import { createLogger, withoutSecrets } from './log.js';

function capture(): { lines: Record<string, unknown>[]; sink: Writable } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { lines, sink };
}

t.test('a line never carries an attestation, a token, an authorization or a justification', async (t) => {
  const { lines, sink } = capture();
  const log = createLogger('info', 'n1', sink);
  const headers = { authorization: 'Bearer s3cret', 'content-type': 'application/json' };
  const envelope = { transaction: 'txn_1', attestation: 'v4.public.tok', amount: 5 };
  const logged = { event: 'x', token: 'tok', justification: 'why', attestation: 'att', authorization: 'auth', headers, envelope, kept: 1 };
  log.info(logged, 'line');
  await new Promise((r) => setImmediate(r));
  t.same(lines[0], { level: 'info', time: lines[0]!.time, node: 'n1', event: 'x', headers: { 'content-type': 'application/json' }, envelope: { transaction: 'txn_1', amount: 5 }, kept: 1, msg: 'line' });
  t.same(logged.headers, { authorization: 'Bearer s3cret', 'content-type': 'application/json' }, 'the object logged is left as it was');
  t.equal(logged.token, 'tok');
});

t.test('an error one level down keeps its message and stack without its secret', async (t) => {
  const { lines, sink } = capture();
  const log = createLogger('info', 'n1', sink);
  const err = Object.assign(new Error('boom'), { attestation: 'v4.public.tok', code: 'E_X' });
  log.error({ err }, 'failed');
  await new Promise((r) => setImmediate(r));
  t.match(lines[0], { err: { type: 'Error', message: 'boom', stack: /boom/, code: 'E_X' } });
  t.notOk('attestation' in (lines[0]!.err as object));
  t.equal(err.attestation, 'v4.public.tok');
});

t.test('a line without secrets is written from the object itself', async (t) => {
  const plain = { event: 'request', plane: 'agent', status: 200, nested: { transaction: 'txn_1' }, list: [{ attestation: 'in an array: not a field of a line' }] };
  t.equal(withoutSecrets(plain), plain, 'no copy');
  const odd = JSON.parse('{"__proto__": {"authorization": "x", "y": 1}, "event": "e"}') as Record<string, unknown>;
  const out = withoutSecrets(odd);
  t.same(Object.getOwnPropertyDescriptor(out, '__proto__')?.value, { y: 1 }, 'a key named __proto__ is a key like any other');
  t.equal(Object.getPrototypeOf(out), Object.prototype);
});
