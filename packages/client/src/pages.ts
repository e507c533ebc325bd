/**
 * Pages of a list route. Every list route answers one page: at most `limit` items
 * (1 to PAGE_LIMIT_MAX, the node's default 100) after the cursor `after`, in id
 * order, and `next`,
 * the cursor of the following page, or null on the last one. A list method of the
 * clients takes the page options and answers one page; its `all...` twin walks every
 * page with `pages` and yields the items one at a time, never holding more than a page.
 */

/** The most items a page may hold, as every list route of the contract says. */
export const PAGE_LIMIT_MAX = 1000;

export interface PageOptions {
  /** limit is the most items in the page: 1 to PAGE_LIMIT_MAX (the node's default: 100). */
  limit?: number | undefined;
  /**
   * after is the `next` of the previous page: this page continues after it. A last
   * page's `next` (null) has nothing after it: a list refuses it with a RangeError
   * before any request, and an `all...` walk from it yields nothing.
   */
  after?: string | null | undefined;
  /** consistency: linearizable (the default) or local (this replica, without a round trip). */
  consistency?: 'linearizable' | 'local' | undefined;
}

/** A page as every list route answers it: its items under a name of its own, and `next`. */
export interface Page {
  next: string | null;
}

/** The query of a page; a limit the node would refuse is refused here, before any request is sent. */
export function pageQuery(o: PageOptions): Record<string, string | number | undefined> {
  if (o.limit !== undefined && !(Number.isInteger(o.limit) && o.limit >= 1 && o.limit <= PAGE_LIMIT_MAX)) {
    throw new RangeError(`limit must be an integer from 1 to ${PAGE_LIMIT_MAX}, not ${String(o.limit)}`);
  }
  if (o.after === null) throw new RangeError('after is null, the next of a last page: there is no page after it');
  return { limit: o.limit, after: o.after, consistency: o.consistency };
}

/**
 * Every item of every page, from the page after `first` on: `fetch(after)` reads one
 * page, `items(page)` takes its items. A cursor that does not move on is the node's
 * bug, not the caller's: it is thrown rather than followed forever.
 */
export async function* pages<P extends Page, T>(fetch: (after: string | undefined) => Promise<P>, items: (page: P) => readonly T[], first?: string | null): AsyncGenerator<T> {
  if (first === null) return; // the next of a last page: nothing comes after it
  let after = first;
  for (;;) {
    const page = await fetch(after);
    yield* items(page);
    if (page.next === null) return;
    if (page.next === after) throw new Error(`the list answered the cursor ${after} as its own next page`);
    after = page.next;
  }
}
