// Proves the parts of the change feed a live node seldom shows, over a plain HTTP
// listener and a journal in memory: a journal that fails half-way ends the stream
// with internal_error and where to resume, and says why in the log only; a node that
// is stopping refuses new feeds with 503 feed_unavailable; a verdict filter passes
// judged intents only; and the query's groups expand to operation types.
import t from 'tap';
import express from 'express';
import { createServer, get, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { Feeds, feedHandler, type FeedSource } from './feed.js';
import { filterOf, matches, FeedQuery } from './feed-query.js';
import { errorHandler } from './http.js';
import { createLogger } from './log.js';
import { Metrics } from './metrics.js';

const HASH = 'a'.repeat(64);
const record = (index: number, type = 'Tick', value: unknown = { tick: index, breaches: [] }) =>
  `{"entry_hash":"${HASH}","index":${index},"op":{"type":"${type}","v":1},"result":{"ok":true,"value":${JSON.stringify(value)}}}`;

async function serve(source: FeedSource) {
  const logged: string[] = [];
  const log = createLogger('info', 'n1', new Writable({ write: (c: Buffer, _e, cb) => (logged.push(c.toString()), cb()) }));
  const feeds = new Feeds(source, { consumersMax: 2, heartbeatIntervalMs: 1000, pageRecordsMax: 2, lagMsMax: 500 }, log, new Metrics());
  const app = express();
  app.use((_req, res, next) => {
    res.locals.principalName = 'ops';
    res.locals.roles = ['operator'];
    next();
  });
  app.get('/admin/v1/feed', feedHandler(feeds));
  app.use(errorHandler(log));
  const server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admin/v1/feed`;
  const read = (query: string) => new Promise<{ status: number; lines: unknown[] }>((resolve, reject) => {
    get(`${url}${query}`, (res: IncomingMessage) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, lines: text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)) }));
    }).on('error', reject);
  });
  return { feeds, read, logged, close: () => new Promise((r) => server.close(r)) };
}

t.test('a journal that fails half-way ends the stream with internal_error and resume_from; the reason goes to the log only', async (t) => {
  const s = await serve({
    applied: () => 9,
    onApplied: () => () => undefined,
    removed: () => false,
    async *journal(from: number) {
      for (const i of [2, 3, 5].filter((i) => i >= from)) yield record(i);
      yield 'not a record at /var/secret/path';
    },
  });
  const r = await s.read('?from=0');
  t.equal(r.status, 200);
  t.same(r.lines, [
    { heartbeat: true, applied: 9, next: 0 },
    JSON.parse(record(2)), JSON.parse(record(3)), JSON.parse(record(5)),
    { error: 'internal_error', message: 'The feed could not read the journal; resume from resume_from, here or on another replica.', resume_from: 6 },
  ]);
  const failed = s.logged.map((l) => JSON.parse(l)).find((l) => l.event === 'feed_failed');
  t.match(failed.err, /a journal record does not start with its entry hash and index: not a record at \/var\/secret\/path/);
  await s.close();
});

t.test('a node that is stopping refuses new feeds with 503 feed_unavailable', async (t) => {
  const s = await serve({ applied: () => 0, onApplied: () => () => undefined, removed: () => false, journal: async function* () {} });
  await s.feeds.close();
  const r = await s.read('?from=0');
  t.equal(r.status, 503);
  t.same(r.lines, [{ error: 'feed_unavailable', message: 'The node is shutting down; follow the feed on another replica.' }]);
  await s.close();
});

t.test('a member removed from the cluster ends its feeds once everything it applied is sent, and refuses new ones', async (t) => {
  let applied = 3;
  let removed = false;
  const listeners = new Set<() => void>();
  const s = await serve({
    applied: () => applied,
    onApplied: (l) => (listeners.add(l), () => listeners.delete(l)),
    removed: () => removed,
    async *journal(from: number) {
      for (const i of [2, 3, 5].filter((i) => i >= from && i <= applied)) yield record(i);
    },
  });
  const reading = s.read('?from=0');
  await new Promise((r) => setTimeout(r, 100));
  // The removal's batch: record 5, and the membership change at 6, which has no record.
  applied = 6;
  removed = true;
  for (const l of listeners) l();
  const r = await reading;
  t.same(r.lines, [
    { heartbeat: true, applied: 3, next: 0 },
    JSON.parse(record(2)), JSON.parse(record(3)), JSON.parse(record(5)),
    { error: 'member_removed', message: 'This member was removed from the cluster; its log ends here. Resume from resume_from on another replica.', resume_from: 7 },
  ], 'the records up to the removal, then the end: not heartbeats for ever');
  const again = await s.read('?from=0');
  t.equal(again.status, 503, 'a client moves on to another replica');
  t.same(again.lines, [{ error: 'feed_unavailable', message: 'This member was removed from the cluster; follow the feed on another replica.' }]);
  await s.close();
});

t.test('filters: groups expand to operation types; a verdict passes judged intents only', async (t) => {
  const q = FeedQuery.parse({ type: 'intent,AddParty', verdict: 'Permitted' });
  const f = filterOf(q);
  t.same([...f.types!], ['SubmitIntent', 'AddParty']);
  const intent = (verdict: string) => record(4, 'SubmitIntent', { kind: 'recorded', outcome: { verdict } });
  t.ok(matches(f, intent('Permitted')));
  t.notOk(matches(f, intent('ForbiddenRejected')));
  t.notOk(matches(f, record(4, 'AddParty', { id: 'p' })), 'an admin operation has no verdict');
  t.notOk(matches(filterOf(FeedQuery.parse({ verdict: 'Permitted' })), record(4)), 'nor has a tick');
  t.ok(matches(filterOf(FeedQuery.parse({ type: 'admin' })), record(4, 'ActivatePolicy', {})));
  t.ok(matches(filterOf(FeedQuery.parse({})), 'anything at all: no filter reads the record'));
});
