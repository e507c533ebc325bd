/**
 * The change feed for people and scripts: `apl feed tail` prints every operation
 * that took effect, from a log index on, and keeps following the log until Ctrl-C
 * (or until `--count` records). It resumes by itself after a disconnect, from the
 * last index it printed plus one (the SDK's iterator, client/src/feed.ts).
 *
 * With --json it prints each record as the node sent it, one per line (NDJSON: the
 * export's lines), rather than one document: a stream has no end to wait for.
 */
import { Command } from 'commander';
import type { FeedRecord } from '@apl/client';
import { act } from '../context.js';
import { UsageError } from '../exit.js';
import { withAdmin } from './admin.js';

const summaryOf: Record<string, (r: FeedRecord) => string> = {
  SubmitIntent: (r) => {
    const v = r.result.value as { outcome?: { transaction: string; verdict: string; posted: boolean } };
    return v.outcome ? `${v.outcome.transaction}  ${v.outcome.verdict}  ${v.outcome.posted ? 'posted' : 'not posted'}` : '';
  },
  Tick: (r) => `tick ${(r.result.value as { tick: number }).tick}`,
};

/** One line for a person: index, operation type, and what it did. */
export function describeRecord(r: FeedRecord): string {
  const by = (r.op.by as { name?: string } | undefined)?.name;
  const subject = ['id', 'issuer', 'agent'].map((k) => r.op[k]).find((v) => typeof v === 'string') as string | undefined;
  const summary = summaryOf[r.op.type]?.(r) ?? [subject, by === undefined ? undefined : `by ${by}`].filter((x) => x !== undefined).join('  ');
  return `${String(r.index).padStart(8)}  ${r.op.type.padEnd(14)}  ${summary}`.trimEnd();
}

/** A non-negative integer option. */
function count(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d{1,15}$/.test(text)) throw new UsageError(`${flag} must be an integer from 0, not ${JSON.stringify(text)}.`);
  return Number(text);
}

interface TailOptions {
  from?: string;
  type?: string;
  verdict?: string;
  count?: string;
}

export function feedCommand(): Command {
  const feed = new Command('feed').description('the change feed: what the ledger decided, live (the feed or operator role)');
  feed.command('tail')
    .description('print each operation that took effect from a log index on, then follow the log (Ctrl-C stops); with --json, one record per line')
    .option('--from <index>', 'the first log index: the last one processed plus one', '0')
    .option('--type <types>', 'only these operation types, comma-separated (intent, tick, admin, SubmitIntent, AddParty, ...)')
    .option('--verdict <verdicts>', 'only intents with these verdicts, comma-separated (Permitted, ForbiddenRejected, ...)')
    .option('--count <n>', 'stop after n records')
    .action(act<TailOptions>(async (ctx, _args, o) => {
      const from = count('--from', o.from)!;
      const limit = count('--count', o.count);
      if (limit === 0) return;
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      ctx.out.note(`following the feed from index ${from}${limit === undefined ? ' (Ctrl-C stops)' : ''}`);
      let printed = 0;
      try {
        await withAdmin(ctx, async (a) => {
          const records = a.feed({
            from, signal: stop.signal,
            ...(o.type === undefined ? {} : { type: o.type }),
            ...(o.verdict === undefined ? {} : { verdict: o.verdict }),
            onReconnect: (r) => ctx.out.note(`the feed ended (${r.reason}); resuming from index ${r.from}`),
          });
          for await (const r of records) {
            process.stdout.write(`${ctx.s.json ? r.line : describeRecord(r)}\n`);
            if (++printed === limit) break;
          }
        });
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
      ctx.out.note(`${printed} record${printed === 1 ? '' : 's'}`);
    }));
  return feed;
}
