/**
 * The paging flags of every list command: `--limit` (the page's size), `--after`
 * (the `next` of the previous page) and `--all` (every page from `--after` on,
 * gathered into one answer whose `next` is null).
 */
import { Option, type Command } from 'commander';
import { PAGE_LIMIT_MAX, pages, type Page, type PageOptions } from '@apl/client';
import { UsageError } from './exit.js';

export interface PageFlags {
  limit?: string;
  after?: string;
  all?: boolean;
}

/** Adds the paging flags to a list command. */
export function paged(c: Command): Command {
  return c
    .addOption(new Option('--limit <n>', `the most items in a page: 1 to ${PAGE_LIMIT_MAX} (the node's default: 100)`))
    .addOption(new Option('--after <cursor>', 'the page after this cursor (the `next` a page ended with)'))
    .addOption(new Option('--all', 'every page, from --after on when it is given'));
}

/** The page options of the flags; a limit the node would refuse is refused here. */
export function pageOptions(o: PageFlags): PageOptions {
  let limit: number | undefined;
  if (o.limit !== undefined) {
    limit = /^[0-9]+$/.test(o.limit) ? Number(o.limit) : NaN;
    if (!(limit >= 1 && limit <= PAGE_LIMIT_MAX)) throw new UsageError(`--limit must be an integer from 1 to ${PAGE_LIMIT_MAX}, not "${o.limit}".`);
  }
  return { ...(limit !== undefined ? { limit } : {}), ...(o.after !== undefined ? { after: o.after } : {}) };
}

/**
 * The page the flags ask for; under `--all`, every page from `--after` on, its items
 * (under `key`) gathered, the other fields those of the last page, and `next` null.
 */
export async function listing<K extends string, P extends Page & Record<K, readonly unknown[]>>(o: PageFlags, key: K, fetch: (p: PageOptions) => Promise<P>): Promise<P> {
  const opts = pageOptions(o);
  if (o.all !== true) return fetch(opts);
  let last: P | null = null;
  const items: unknown[] = [];
  const read = async (after: string | undefined) => (last = await fetch({ ...opts, after }));
  for await (const item of pages(read, (p) => p[key], opts.after)) items.push(item);
  return { ...last!, [key]: items, next: null };
}

/** The line under a table that says how to read on, when there is more. */
export function more(page: Page): string {
  return page.next === null ? '' : `\nmore: the next page is --after ${page.next} (or --all for every page)`;
}
