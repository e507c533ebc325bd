// Proves the change feed (GET /admin/v1/feed) on a live node over HTTPS: a consumer
// that starts at 0 while intents stream in receives every record once, in log
// order, across a disconnect and a resumption, and the records are the export's,
// byte for byte; a filtered feed carries only what matches, with the records' own
// indexes, and its heartbeats let the consumer's cursor pass what it never saw; a
// `from` beyond the applied index waits; a consumer that stops reading is cut off
// with where to resume, the node's heap does not grow with it, and resuming there
// loses nothing; the feed role reads the feed and nothing else, and a role without
// feed rights is refused; bad queries answer 400 and change nothing; the number of
// feeds is bounded; and a node that stops ends its feeds with where to resume.
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import type { IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parseJson } from '@apl/core';
import { contract } from './support/contract.js';
import { AGENT_A, EVIDENCE, TOKENS, bootstrap, envelope, startTestNode, testCerts, type Response, type TestNode } from './support/node.js';

// The node runs in this process: a full collection before each reading of its heap
// makes the figure what is retained, not what awaits collection.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const HEARTBEAT_MS = 150;
const LAG_MS = 500;
let n: TestNode;
let att: string;

t.before(async () => {
  n = await startTestNode({ feed: { heartbeat_interval_ms: HEARTBEAT_MS, lag_ms_max: LAG_MS, page_records_max: 50, consumers_max: 4 } });
  await bootstrap(n);
  att = await n.issuer.sign(AGENT_A);
});
t.teardown(() => n.close());

interface Line {
  text: string;
  value: any;
}

interface Feed {
  status: number;
  res: IncomingMessage;
  /** The next line, or null when the stream has ended. */
  next(): Promise<Line | null>;
  close(): void;
}

/** Opens a feed; an answer other than 200 is read whole and checked against the contract. */
function openFeed(query: string, token = TOKENS.operator): Promise<Feed & { refusal?: Response }> {
  const path = `/admin/v1/feed${query}`;
  return new Promise((resolve, reject) => {
    const req = request(`${n.node.adminUrl}${path}`, { ca: readFileSync(testCerts().ca), headers: { authorization: `Bearer ${token}` } }, (res) => {
      const close = () => req.destroy();
      if (res.statusCode !== 200) {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const refusal = { status: res.statusCode!, headers: res.headers, text, body: parseJson(text) };
          contract('admin', 'GET', path, refusal);
          resolve({ status: res.statusCode!, res, refusal, next: async () => null, close });
        });
        return;
      }
      let lines: AsyncIterator<string> | null = null;
      resolve({
        status: 200, res, close,
        next: async () => {
          lines ??= createInterface({ input: res, crlfDelay: Infinity })[Symbol.asyncIterator]();
          const r = await lines.next().catch(() => ({ done: true as const, value: undefined }));
          return r.done ? null : { text: r.value, value: parseJson(r.value) };
        },
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** The lines up to and including the first that `stop` accepts; fails on an ended stream. */
async function readUntil(f: Feed, stop: (l: Line) => boolean): Promise<Line[]> {
  const out: Line[] = [];
  for (;;) {
    const l = await f.next();
    if (l === null) throw new Error(`the feed ended after ${out.length} lines`);
    out.push(l);
    if (stop(l)) return out;
  }
}

const records = (ls: Line[]) => ls.filter((l) => l.value.heartbeat !== true && l.value.error === undefined);

async function exportLines(): Promise<string[]> {
  const text = await new Promise<string>((resolve, reject) => {
    const req = request(`${n.node.adminUrl}/admin/v1/log/export`, { ca: readFileSync(testCerts().ca), headers: { authorization: `Bearer ${TOKENS.operator}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    });
    req.on('error', reject);
    req.end();
  });
  return text.split('\n').filter((l) => l !== '');
}

const indexOf = (line: string) => Number(/"index":(\d+)/.exec(line)![1]);
const applied = async () => (await n.adm('operator', 'GET', '/admin/v1/log/digest')).body.applied_index as number;

/** Submits `count` intents, `parallel` at a time; every third one is over the policy's cap (ForbiddenRejected). */
async function submit(count: number, parallel = 16, over: Record<string, unknown> = {}): Promise<void> {
  for (let done = 0; done < count; done += parallel) {
    const batch = Array.from({ length: Math.min(parallel, count - done) }, (_, k) => {
      const minor = (done + k) % 3 === 2 ? 700000 : 1000 + done + k;
      return n.api('POST', '/api/v1/intents', { body: envelope(att, { minor, ...over }) });
    });
    for (const r of await Promise.all(batch)) if (r.status !== 200) throw new Error(`intent: ${r.status} ${r.text}`);
  }
}

const metric = async (name: string): Promise<number> => {
  const text = (await n.admin.request('GET', '/metrics')).text;
  const m = new RegExp(`^${name.replace(/[{}"]/g, (c) => `\\${c}`)} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
};

async function until(t: Test, what: string, ok: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) return void t.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

t.test('from 0 while intents stream in: every record once, in order, across a disconnect; the same records as the export', async (t) => {
  const seen: Line[] = [];
  let f = await openFeed('?from=0');
  t.equal(f.status, 200);
  t.equal(f.res.headers['content-type'], 'application/x-ndjson; charset=utf-8');
  const first = await f.next();
  t.match(first!.value, { heartbeat: true, next: 0 }, 'the stream opens with a heartbeat: applied index and cursor');
  const streaming = submit(60);
  // Read some records, then drop the connection and resume from the last index + 1.
  seen.push(...records(await readUntil(f, (l) => records([l]).length === 1 && indexOf(l.text) > 20)));
  f.close();
  const cursor = indexOf(seen[seen.length - 1]!.text) + 1;
  f = await openFeed(`?from=${cursor}`);
  await streaming;
  const all = await exportLines();
  const last = indexOf(all[all.length - 1]!);
  seen.push(...records(await readUntil(f, (l) => records([l]).length === 1 && indexOf(l.text) === last)));
  f.close();
  const indexes = seen.map((l) => indexOf(l.text));
  t.ok(indexes.every((i, k) => k === 0 || i > indexes[k - 1]!), 'indexes strictly increase: nothing repeated, log order');
  t.strictSame(seen.map((l) => l.text), all, 'byte for byte the records of the export, none missing');
  t.equal(seen.filter((l) => l.value.op.type === 'SubmitIntent').length, 60, 'all 60 intents');
});

t.test('filters by type and verdict keep the records\' indexes; heartbeats carry the cursor past what was filtered out', async (t) => {
  const all = await exportLines();
  const parsed = all.map((text) => ({ text, value: parseJson(text) as any }));
  const forbidden = parsed.filter((r) => r.value.op.type === 'SubmitIntent' && r.value.result.value.outcome.verdict === 'ForbiddenRejected').map((r) => r.text);
  t.ok(forbidden.length >= 20, `${forbidden.length} refusals to find`);
  const top = await applied();
  const f = await openFeed('?from=0&type=intent&verdict=ForbiddenRejected');
  const lines = await readUntil(f, (l) => l.value.heartbeat === true && l.value.next > top);
  f.close();
  t.strictSame(records(lines).map((l) => l.text), forbidden, 'only the refusals, as the export has them');
  const beat = lines[lines.length - 1]!.value;
  t.same(beat, { heartbeat: true, applied: top, next: top + 1 }, 'the cursor has passed every record up to the applied index');

  const admin = parsed.filter((r) => !['SubmitIntent', 'Tick'].includes(r.value.op.type)).map((r) => r.text);
  const g = await openFeed('?type=admin,Tick');
  const adminLines = records(await readUntil(g, (l) => l.value.heartbeat === true && l.value.next > top));
  g.close();
  t.strictSame(adminLines.map((l) => l.text), [...admin, ...parsed.filter((r) => r.value.op.type === 'Tick').map((r) => r.text)].sort((a, b) => indexOf(a) - indexOf(b)), 'the group admin and the type Tick, in log order');
  t.ok(adminLines.length >= 15, 'the bootstrap\'s operations are there');
});

t.test('a from beyond the applied index waits with heartbeats, then carries the records from there', async (t) => {
  const top = await applied();
  const from = top + 3;
  const f = await openFeed(`?from=${from}`);
  const waiting = await readUntil(f, (l) => l.value.heartbeat === true && l.value.applied === top);
  t.same(waiting[waiting.length - 1]!.value, { heartbeat: true, applied: top, next: from }, 'open, waiting at from');
  const second = await readUntil(f, (l) => l.value.heartbeat === true);
  t.same(second[0]!.value, { heartbeat: true, applied: top, next: from }, 'a heartbeat again while idle');
  await submit(5, 5);
  const got = records(await readUntil(f, (l) => records([l]).length === 1 && indexOf(l.text) === top + 5));
  f.close();
  t.strictSame(got.map((l) => indexOf(l.text)), [from, from + 1, from + 2], 'from `from` on, nothing before it');
});

t.test('the feed role reads the feed and nothing else; a role without feed rights is refused', async (t) => {
  const rail = await openFeed('?from=0', TOKENS.feed);
  t.equal(rail.status, 200, 'the feed role reads the feed');
  rail.close();
  const reviewer = await openFeed('?from=0', TOKENS.reviewer);
  t.equal(reviewer.status, 403);
  t.strictSame(reviewer.refusal!.body, { error: 'forbidden', message: 'bob may not read the change feed (it needs the feed or operator role).' });
  const before = await applied();
  const confined = { error: 'forbidden', message: 'rail may only read the change feed (GET /admin/v1/feed): its only role is feed.' };
  for (const [method, path, body] of [['GET', '/admin/v1/log/export'], ['GET', '/admin/v1/log/digest'], ['GET', '/admin/v1/parties'], ['GET', '/admin/v1/cluster'], ['POST', '/admin/v1/parties', { id: 'party_rail' }]] as const) {
    const r = await n.adm('feed', method, path, body);
    t.equal(r.status, 403, `${method} ${path}`);
    t.strictSame(r.body, confined);
  }
  t.equal(await applied(), before, 'nothing was recorded');
  const parties = await n.adm('operator', 'GET', '/admin/v1/parties');
  t.notOk(parties.body.parties.some((p: { id: string }) => p.id === 'party_rail'));
});

t.test('a bad query answers 400 malformed_request naming the parameter, and changes nothing', async (t) => {
  const before = await applied();
  const index = 'must be a log index: an integer from 0 to 9007199254740991';
  const cases: [string, string, string][] = [
    ['?from=-1', 'from', index],
    ['?from=abc', 'from', index],
    ['?from=', 'from', index],
    ['?from=1.5', 'from', index],
    ['?from=99999999999999999', 'from', index],
    ['?from=1&from=2', 'from', 'is given more than once; give it once'],
    ['?verdict=Maybe', 'verdict.0', 'must be verdicts, separated by commas: Permitted, ForbiddenRejected, NotPermittedRejected, RepairOutstandingRejected, ObligationUnmetRejected'],
    ['?type=intent,Bogus', 'type.1', /^must be operation types or intent, tick, admin, separated by commas: intent, tick, admin, SubmitIntent, Tick, AddTrustRoot/ as unknown as string],
    ['?since=3', '', 'unknown field "since"'],
  ];
  for (const [query, path, message] of cases) {
    const f = await openFeed(query);
    t.equal(f.status, 400, query);
    t.match(f.refusal!.body, { error: 'malformed_request', message: 'The feed query is not valid.', issues: [{ path, message }] }, query);
  }
  t.equal(await applied(), before, 'nothing changed');
});

t.test('a consumer that stops reading is cut off with where to resume; the heap stays bounded; resuming there loses nothing', async (t) => {
  // Records of about 6 KiB (64 evidence digests each), so that the journal is larger
  // than what the loopback socket buffers hold for a reader that reads nothing. Usage
  // records impose no obligation, so the party's obligations stay under their limit.
  const evidence = Array.from({ length: 64 }, (_, k) => EVIDENCE.slice(0, 60) + k.toString(16).padStart(4, '0'));
  const started = Date.now();
  await submit(700, 48, { evidence, action: { action: 'usage.record', bindings: {} } });
  t.comment(`700 intents submitted in ${Date.now() - started} ms`);
  const all = await exportLines();
  const bytes = all.reduce((s, l) => s + Buffer.byteLength(l) + 1, 0);
  const last = indexOf(all[all.length - 1]!);

  // A consumer that reads as fast as it can (counting lines, parsing none): the whole journal, timed.
  const t0 = process.hrtime.bigint();
  const fast = await openFeed('?from=0');
  let count = 0;
  let tail = '';
  await new Promise<void>((resolve) => {
    fast.res.on('data', (c: Buffer) => {
      const text = tail + c.toString('utf8');
      const parts = text.split('\n');
      tail = parts.pop()!;
      for (const p of parts) if (p.startsWith('{"entry_hash"')) count++;
      if (parts.some((p) => p.includes(`"index":${last},`))) resolve();
    });
  });
  fast.close();
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  t.comment(`a reading consumer: ${count} records, ${(bytes / 2 ** 20).toFixed(1)} MiB in ${s.toFixed(2)} s: ${Math.round(count / s)} records/s, ${(bytes / 2 ** 20 / s).toFixed(1)} MiB/s`);
  t.equal(count, all.length, 'it received every record');

  const heap = () => {
    gc();
    return metric('nodejs_heap_size_used_bytes');
  };
  const lagging = () => metric('apl_feed_ends_total{reason="feed_lagging"}');
  const cutBefore = await lagging();
  const heapBefore = await heap();
  const slow = await Promise.all([openFeed('?from=0'), openFeed('?from=0'), openFeed('?from=0')]);
  let heapMax = heapBefore;
  await until(t, 'three feeds cut off', async () => {
    heapMax = Math.max(heapMax, await heap());
    return (await lagging()) - cutBefore === 3;
  });
  t.comment(`heapUsed ${(heapBefore / 2 ** 20).toFixed(1)} MiB before three stalled consumers of a ${(bytes / 2 ** 20).toFixed(1)} MiB journal, at most ${(heapMax / 2 ** 20).toFixed(1)} MiB while they stalled (${Math.round((heapMax - heapBefore) / 1024)} KiB more)`);
  t.ok(heapMax - heapBefore < 8 * 2 ** 20, 'the heap grew by less than 8 MiB (queuing the journal three times would take more than 20 MiB)');

  // The first stalled consumer reads again: what it was sent, then where to resume.
  const lines = await readUntil(slow[0]!, (l) => l.value.error !== undefined);
  t.equal(await slow[0]!.next(), null, 'the stream ends after that line');
  const end = lines[lines.length - 1]!.value;
  t.match(end, { error: 'feed_lagging', message: `The consumer read nothing for ${LAG_MS} ms while its buffer was full; resume from resume_from.` });
  const sent = records(lines);
  t.ok(end.resume_from < last, `cut off at ${end.resume_from} of ${last}: the node did not queue the whole journal`);
  t.equal(end.resume_from, indexOf(sent[sent.length - 1]!.text) + 1, 'resume_from follows the last record it was sent');
  t.strictSame(sent.map((l) => l.text), all.filter((l) => indexOf(l) < end.resume_from), 'every record before resume_from, once');
  const resumed = await openFeed(`?from=${end.resume_from}`);
  const rest = records(await readUntil(resumed, (l) => records([l]).length === 1 && indexOf(l.text) === last));
  resumed.close();
  t.strictSame([...sent, ...rest].map((l) => l.text), all, 'with the resumed feed: the whole journal, nothing twice');
  for (const f of slow) f.close();
  await until(t, 'the feeds to be released', async () => (await metric('apl_feed_consumers')) === 0);
});

t.test('feed.consumers_max bounds the feeds served at once: one more answers 503 feed_unavailable', async (t) => {
  const open = await Promise.all([1, 2, 3, 4].map(() => openFeed('?from=0&type=Tick')));
  t.same(open.map((f) => f.status), [200, 200, 200, 200]);
  const over = await openFeed('?from=0');
  t.equal(over.status, 503);
  t.equal(over.res.headers['retry-after'], '1');
  t.strictSame(over.refusal!.body, { error: 'feed_unavailable', message: 'This node serves 4 feeds already (feed.consumers_max); retry later or follow another replica.' });
  open[0]!.close();
  await until(t, 'a feed to be released', async () => (await metric('apl_feed_consumers')) === 3);
  const again = await openFeed('?from=0&type=Tick');
  t.equal(again.status, 200, 'a slot freed is served');
  for (const f of [...open, again]) f.close();
  await until(t, 'the feeds to be released', async () => (await metric('apl_feed_consumers')) === 0);
});

t.test('a node that stops ends its feeds with where to resume', async (t) => {
  const top = await applied();
  const f = await openFeed(`?from=${top + 1}`);
  await f.next();
  const closing = n.node.close();
  const lines = await readUntil(f, (l) => l.value.error !== undefined);
  t.same(lines[lines.length - 1]!.value, { error: 'shutting_down', message: 'The node is shutting down; resume from resume_from on another replica.', resume_from: top + 1 });
  await closing;
});
