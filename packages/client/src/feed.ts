/**
 * Following the change feed (`GET /admin/v1/feed`): an async iterator of the records
 * of every operation that took effect, in log order, that reconnects by itself.
 *
 * The iterator keeps a cursor: the index after the last record it yielded, moved
 * further by heartbeats (`next`) and by the `resume_from` of a stream the node ended.
 * After a disconnect, a refused connection, a node that stops or a stream cut off for
 * lagging, it waits `reconnectDelayMs` and opens the feed again from the cursor, on
 * the same address. Within one iterator no record is yielded
 * twice and none is skipped. It ends when `signal` aborts, or throws when the node
 * refuses the feed for good (401, 403, 400).
 *
 * Across processes the guarantee is the consumer's: resume from its own stored
 * cursor and it sees every record at least once; store `record.index` in the same
 * transaction as what it does with the record and it sees each exactly once.
 */
import type { IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { errorOf } from './call.js';
import { ApiError, UnexpectedResponseError } from './errors.js';
import { parseJson } from './json.js';
import { answerOf, type Transport } from './transport.js';

/** A record of the feed: the export's `{entry_hash, index, op, result}`, and its line as sent. */
export interface FeedRecord {
  index: number;
  entry_hash: string;
  op: { type: string; [field: string]: unknown };
  result: { ok: true; value: unknown };
  /** line is the record's canonical JSON exactly as the node sent it (what the export holds). */
  line: string;
}

export interface FeedHeartbeat {
  heartbeat: true;
  /** applied is the serving replica's applied index. */
  applied: number;
  /** next is the index the stream continues from: every record before it was sent or filtered out. */
  next: number;
}

export interface FeedOptions {
  /** from is the first log index to yield (default 0): a stored cursor is the last index processed plus one. */
  from?: number;
  /** type: only these operation types (SubmitIntent, Tick, an admin type, or the groups intent, tick, admin). */
  type?: string | readonly string[];
  /** verdict: only judged intents with these verdicts. */
  verdict?: string | readonly string[];
  /** signal ends the iteration when aborted. */
  signal?: AbortSignal;
  /** reconnectDelayMs is the wait before opening the feed again (default 1000). */
  reconnectDelayMs?: number;
  /** idleTimeoutMs: a stream silent this long (not even a heartbeat) is dropped and reopened (default 30000). */
  idleTimeoutMs?: number;
  onHeartbeat?: (h: FeedHeartbeat) => void;
  /** onReconnect is told why the stream ended and where the next one starts. */
  onReconnect?: (r: { from: number; reason: string }) => void;
}

const RECONNECT_DELAY_MS = 1000;
const IDLE_TIMEOUT_MS = 30_000;

/**
 * Failures that do not go away by asking again: a refusal of the credential, its role
 * or the query, and a line that is not JSON. A server's failure (a 5xx, from the node
 * or a proxy before it) may, and the feed asks again.
 */
const isFinal = (err: unknown) =>
  (err instanceof ApiError && err.status < 500 && err.status !== 421 && err.status !== 429) || (err instanceof UnexpectedResponseError && err.status < 500);

function parseLine(line: string): Partial<FeedRecord & FeedHeartbeat & { error: string; resume_from: number }> {
  try {
    return parseJson(line) as Partial<FeedRecord & FeedHeartbeat & { error: string; resume_from: number }>;
  } catch {
    throw new UnexpectedResponseError(200, line, `the feed sent a line that is not JSON: ${line.slice(0, 200)}`);
  }
}

function feedPath(cursor: number, o: FeedOptions): string {
  const q = new URLSearchParams({ from: String(cursor) });
  const list = (v: string | readonly string[]) => (typeof v === 'string' ? v : v.join(','));
  if (o.type !== undefined) q.set('type', list(o.type));
  if (o.verdict !== undefined) q.set('verdict', list(o.verdict));
  return `/admin/v1/feed?${q.toString()}`;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Opens one stream; rejects with the node's error for an answer other than 200. */
async function open(t: Transport, url: string, token: string, cursor: number, o: FeedOptions): Promise<IncomingMessage> {
  const res = await t.open('GET', feedPath(cursor, o), { headers: { authorization: `Bearer ${token}`, accept: 'application/x-ndjson' }, ...(o.signal ? { signal: o.signal } : {}) }, url);
  if (res.statusCode === 200) return res;
  throw errorOf(await answerOf(res, url));
}

export async function* follow(t: Transport, token: string, o: FeedOptions = {}): AsyncGenerator<FeedRecord> {
  let cursor = o.from ?? 0;
  if (!Number.isSafeInteger(cursor) || cursor < 0) throw new RangeError(`from must be a log index (an integer from 0), not ${cursor}`);
  // Every replica serves the feed from its own log: after a failure (a replica that
  // died, refused the connection or is at capacity) the next configured one is asked.
  let at = Math.max(0, t.urls.indexOf(t.url));
  while (!o.signal?.aborted) {
    let reason: string;
    let res: IncomingMessage | null = null;
    try {
      res = await open(t, t.urls[at]!, token, cursor, o);
      res.setTimeout(o.idleTimeoutMs ?? IDLE_TIMEOUT_MS, () => res!.destroy(new Error('the stream was silent for too long')));
      reason = 'the stream ended';
      for await (const line of createInterface({ input: res, crlfDelay: Infinity })) {
        if (o.signal?.aborted) return; // the lines already read are not yielded after an abort
        if (line === '') continue;
        const v = parseLine(line);
        if (v.heartbeat === true) {
          cursor = Math.max(cursor, v.next!);
          o.onHeartbeat?.(v as FeedHeartbeat);
        } else if (typeof v.error === 'string') {
          cursor = Math.max(cursor, v.resume_from!);
          reason = v.error;
        } else if (v.index! >= cursor) {
          cursor = v.index! + 1;
          yield { ...(v as Omit<FeedRecord, 'line'>), line };
        }
      }
    } catch (err) {
      if (o.signal?.aborted) return;
      if (isFinal(err)) throw err;
      reason = (err as Error).message;
      at = (at + 1) % t.urls.length;
    } finally {
      res?.destroy();
    }
    if (o.signal?.aborted) return;
    o.onReconnect?.({ from: cursor, reason });
    await pause(o.reconnectDelayMs ?? RECONNECT_DELAY_MS, o.signal);
  }
}
