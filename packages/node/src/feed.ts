/**
 * The change feed: `GET /admin/v1/feed?from=<log index>` streams, as NDJSON, the
 * journal records of every operation that took effect (the export's records, byte for
 * byte), in log order from `from`, and then follows the log as entries are applied.
 * Any replica serves it from its own applied state; no Raft round is made.
 *
 * The contract with a consumer (docs/feed.md):
 * 1. Every record below the stream's cursor has been written or filtered out; the
 *    cursor only moves forward, so one stream never skips or repeats a record.
 * 2. A heartbeat `{"heartbeat":true,"applied":A,"next":N}` is written whenever
 *    nothing was written for `feed.heartbeat_interval_ms`; `next` is the cursor, so
 *    a filtered consumer can move its own cursor past records it never saw.
 * 3. A stream that ends with a line `{"error", "message", "resume_from"}` may be
 *    resumed with `from=resume_from` without loss.
 *
 * Limits, so that a slow reader never grows the node's memory: the store is read at
 * most `feed.page_records_max` records at a time, nothing more is read while the
 * response's send buffer is full (`res.write()` returned false), and a consumer whose
 * buffer stays full for `feed.lag_ms_max` is cut off (`feed_lagging`). At most
 * `feed.consumers_max` feeds run at once; one more answers 503 `feed_unavailable`.
 */
import type { Request, Response } from 'express';
import { ApiError } from './errors.js';
import { filterOf, matches, recordIndex, FeedQuery, type FeedFilter } from './feed-query.js';
import { parseRequest, queryOf } from './http.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import { mayReadFeed, type PlaneRole } from './roles.js';

/** What a feed reads: the replica's applied index, its journal, and news of each apply. */
export interface FeedSource {
  /** applied is the index of the last entry applied here. */
  applied(): number;
  /** The journal's records from log index `from` on, in log order (LedgerStore.journal). */
  journal(from: number): AsyncIterable<string>;
  /** Calls `listener` after each batch of entries is applied; returns the unsubscribe. */
  onApplied(listener: () => void): () => void;
  /** Whether this member was removed from the cluster: its journal ends at the removal. */
  removed(): boolean;
}

export interface FeedLimits {
  consumersMax: number;
  heartbeatIntervalMs: number;
  pageRecordsMax: number;
  lagMsMax: number;
}

/** Why a stream ended, for the metric and, unless the consumer left, the final line. */
type Ending = { error: 'feed_lagging' | 'shutting_down' | 'member_removed' | 'internal_error'; message: string };

const REMOVED: Ending = { error: 'member_removed', message: 'This member was removed from the cluster; its log ends here. Resume from resume_from on another replica.' };

/** The feeds of one node: how many run, and stopping them all when the node stops. */
export class Feeds {
  private readonly streams = new Set<FeedStream>();
  private closing = false;

  constructor(private readonly source: FeedSource, private readonly limits: FeedLimits, private readonly log: Logger, private readonly metrics: Metrics) {}

  get count(): number {
    return this.streams.size;
  }

  /** Serves one feed on `res` until the consumer leaves, falls behind, or the node stops. */
  async serve(res: Response, from: number, filter: FeedFilter): Promise<void> {
    if (this.closing) throw unavailable(res, 'The node is shutting down; follow the feed on another replica.');
    // Its state stops at its removal: a feed here would send heartbeats for ever and nothing more.
    if (this.source.removed()) throw unavailable(res, 'This member was removed from the cluster; follow the feed on another replica.');
    if (this.streams.size >= this.limits.consumersMax) {
      throw unavailable(res, `This node serves ${this.limits.consumersMax} feeds already (feed.consumers_max); retry later or follow another replica.`);
    }
    const s = new FeedStream(res, from, filter, this.source, this.limits, () => this.metrics.feedRecords.inc());
    this.streams.add(s);
    this.metrics.feedConsumers.set(this.streams.size);
    try {
      const ending = await s.run();
      this.metrics.feedEnds.inc({ reason: ending?.error ?? 'consumer_left' });
      if (s.failure) this.log.error({ event: 'feed_failed', err: s.failure.message }, 'a feed could not read the journal');
    } finally {
      this.streams.delete(s);
      this.metrics.feedConsumers.set(this.streams.size);
    }
  }

  /** Ends every feed with where to resume; resolves once their responses are done. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.all([...this.streams].map((s) => s.stop({ error: 'shutting_down', message: 'The node is shutting down; resume from resume_from on another replica.' })));
  }
}

function unavailable(res: Response, message: string): ApiError {
  res.set('Retry-After', '1');
  return new ApiError('feed_unavailable', message);
}

/** The route: the feed or operator role, then the query, then the stream. */
export function feedHandler(feeds: Feeds): (req: Request, res: Response) => Promise<void> {
  return async (req, res) => {
    const name = res.locals.principalName as string;
    if (!mayReadFeed(res.locals.roles as PlaneRole[])) throw new ApiError('forbidden', `${name} may not read the change feed (it needs the feed or operator role).`);
    const q = parseRequest(FeedQuery, queryOf(req, 'feed query'), 'feed query');
    await feeds.serve(res, q.from ?? 0, filterOf(q));
  };
}

/** One consumer's stream. */
class FeedStream {
  /** cursor: every record below it has been written or filtered out. Invariant: it never decreases. */
  private cursor: number;
  /** failure is what stopped the stream from reading the journal, for the log (never for the consumer). */
  failure: Error | null = null;
  private lastWriteAt = 0;
  private gone = false;
  private ending: Ending | null = null;
  /** waiting says what the stream waits for, so that news of an apply wakes only an idle stream. */
  private waiting: 'idle' | 'drain' | null = null;
  private wake: (() => void) | null = null;
  private finished: Promise<void> | null = null;

  constructor(
    private readonly res: Response,
    from: number,
    private readonly filter: FeedFilter,
    private readonly source: FeedSource,
    private readonly limits: FeedLimits,
    private readonly counted: () => void,
  ) {
    this.cursor = from;
  }

  run(): Promise<Ending | null> {
    const done = this.loop();
    this.finished = done.then(() => undefined);
    return done;
  }

  /** Ends the stream from outside (the node stops); resolves once it has ended. */
  async stop(ending: Ending): Promise<void> {
    this.ending ??= ending;
    this.poke('stop');
    await this.finished;
  }

  private get over(): boolean {
    return this.gone || this.ending !== null;
  }

  private async loop(): Promise<Ending | null> {
    const { res } = this;
    res.on('close', () => {
      this.gone = true;
      this.poke('stop');
    });
    // A feed is one long answer; it is not kept alive for another request after it ends.
    res.status(200).set({ 'Cache-Control': 'no-store', Connection: 'close' }).type('application/x-ndjson; charset=utf-8');
    res.flushHeaders();
    const unlisten = this.source.onApplied(() => this.poke('applied'));
    try {
      await this.heartbeat();
      while (!this.over) {
        const applied = this.source.applied();
        if (this.cursor <= applied) await this.page(applied);
        else if (this.source.removed()) this.ending ??= REMOVED; // everything it applied is sent
        else await this.wait('idle', Math.max(0, this.lastWriteAt + this.limits.heartbeatIntervalMs - Date.now()));
        if (!this.over && Date.now() - this.lastWriteAt >= this.limits.heartbeatIntervalMs) await this.heartbeat();
      }
    } catch (err) {
      this.failure = err as Error;
      this.ending ??= { error: 'internal_error', message: 'The feed could not read the journal; resume from resume_from, here or on another replica.' };
    } finally {
      unlisten();
    }
    this.end();
    return this.gone && this.ending === null ? null : this.ending;
  }

  /** Writes the matching records of [cursor, upto], at most a page of them read. */
  private async page(upto: number): Promise<void> {
    let read = 0;
    for await (const line of this.source.journal(this.cursor)) {
      const index = recordIndex(line);
      if (index > upto) break;
      const keep = matches(this.filter, line);
      // The cursor moves before the write waits: a written line is in the buffer.
      this.cursor = index + 1;
      if (keep) {
        this.counted();
        await this.write(`${line}\n`);
      }
      if (this.over) return;
      if (++read === this.limits.pageRecordsMax) return;
    }
    this.cursor = upto + 1;
  }

  private heartbeat(): Promise<void> {
    return this.write(`${JSON.stringify({ heartbeat: true, applied: this.source.applied(), next: this.cursor })}\n`);
  }

  /** Writes a line; while the send buffer is full, waits for it to drain, at most lag_ms_max. */
  private async write(text: string): Promise<void> {
    this.lastWriteAt = Date.now();
    if (this.res.write(text)) return;
    const drain = () => this.poke('drain');
    this.res.once('drain', drain);
    try {
      const drained = await this.wait('drain', this.limits.lagMsMax);
      if (!drained && !this.over) {
        this.ending = { error: 'feed_lagging', message: `The consumer read nothing for ${this.limits.lagMsMax} ms while its buffer was full; resume from resume_from.` };
      }
    } finally {
      this.res.off('drain', drain);
    }
  }

  /** Waits for a poke or `ms`; true when poked. */
  private wait(what: 'idle' | 'drain', ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(false), ms);
      const settle = (poked: boolean) => {
        clearTimeout(timer);
        this.waiting = null;
        this.wake = null;
        resolve(poked);
      };
      this.waiting = what;
      this.wake = () => settle(true);
    });
  }

  private poke(why: 'applied' | 'drain' | 'stop'): void {
    if (why === 'applied' && this.waiting !== 'idle') return;
    if (why === 'drain' && this.waiting !== 'drain') return;
    this.wake?.();
  }

  /**
   * The last line says why the stream ended and where to resume. It may sit in a full
   * buffer: a consumer that does not read it within lag_ms_max is disconnected.
   */
  private end(): void {
    const { res } = this;
    if (this.gone) return;
    if (this.ending) res.write(`${JSON.stringify({ ...this.ending, resume_from: this.cursor })}\n`);
    res.end();
    const timer = setTimeout(() => res.destroy(), this.limits.lagMsMax);
    res.once('close', () => clearTimeout(timer));
  }
}
