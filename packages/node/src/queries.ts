/**
 * What the planes read, from the state store: single records by key (through the
 * store's cache) and pages of records in key order. No read scans the state: a
 * list is a page of at most PAGE_LIMIT_MAX records that reads at most PAGE_SCAN_MAX,
 * and says where to continue.
 */
import {
  obligationKey, recordedKey, scoped, TABLES,
  type Obligation, type OwedEntry, type Party, type Policy, type TransactionRecord, type TrustRoot, type Account, type Usage,
} from '@apl/core';
import type { LedgerStore } from './ledger-store.js';

/** The most items one page holds; `limit` defaults to PAGE_LIMIT_DEFAULT. */
export const PAGE_LIMIT_MAX = 1000;
export const PAGE_LIMIT_DEFAULT = 100;
/** The most records one page reads to find its items (a filter may skip many). */
export const PAGE_SCAN_MAX = 5000;

export interface Page<T> {
  items: T[];
  /** the cursor to pass as `after` for the next page; null when there is no more. */
  next: string | null;
}

export type ObligationFilter = 'owed' | 'open' | 'breached' | 'discharged' | 'all';

export class Queries {
  constructor(private readonly store: LedgerStore) {}

  agentParty(uri: string): Promise<string | undefined> {
    return this.store.get<string>(TABLES.agent.prefix + uri);
  }

  trustRoot(issuer: string): Promise<TrustRoot | undefined> {
    return this.store.get<TrustRoot>(TABLES.root.prefix + issuer);
  }

  /** A party's recorded transaction: where it was recorded, then the record there. */
  async transaction(party: string, id: string): Promise<TransactionRecord | undefined> {
    const at = await this.store.get<number>(TABLES.transaction.prefix + scoped(party, id));
    return at === undefined ? undefined : this.store.get<TransactionRecord>(recordedKey(at));
  }

  /**
   * A recorded transaction if the store's cache holds it (no disk read): the record, null
   * when the cache knows there is none, undefined when it cannot tell. See LedgerStore.cached.
   */
  cachedTransaction(party: string, id: string): TransactionRecord | null | undefined {
    const at = this.store.cached<number>(TABLES.transaction.prefix + scoped(party, id));
    if (at === null || at === undefined) return at;
    return this.store.cached<TransactionRecord>(recordedKey(at)) ?? undefined;
  }

  account(id: string): Promise<Account | undefined> {
    return this.store.get<Account>(TABLES.account.prefix + id);
  }

  usage(id: string): Promise<Usage | undefined> {
    return this.store.get<Usage>(TABLES.usage.prefix + id);
  }

  policy(id: string): Promise<Policy | undefined> {
    return this.store.get<Policy>(TABLES.policy.prefix + id);
  }

  async activePolicyId(): Promise<string | null> {
    return (await this.store.get<string>(`${TABLES.meta.prefix}active`)) ?? null;
  }

  async tick(): Promise<number> {
    return (await this.store.get<number>(`${TABLES.meta.prefix}tick`)) ?? 0;
  }

  /**
   * A party's obligations: what it owes (open ones and breached repair duties, at most
   * LIMITS.obligationsOwedMax, by deadline then id, in one page), or those in one state
   * or all, in id order, a page at a time.
   */
  async obligations(party: string, which: ObligationFilter, page: { after?: string | undefined; limit: number }): Promise<Page<Obligation>> {
    if (which === 'owed') {
      const owed = (await this.store.get<OwedEntry[]>(TABLES.owed.prefix + party)) ?? [];
      const all = await Promise.all(owed.map((e) => this.obligation(party, e.id)));
      const sorted = all.filter((o): o is Obligation => o !== undefined)
        .sort((a, b) => a.deadline_tick - b.deadline_tick || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      return { items: sorted, next: null };
    }
    // A page of the party's id index, each followed to the obligation, until `limit` are
    // kept or PAGE_SCAN_MAX have been read.
    const index = `${TABLES.obligationTick.prefix}${party}/`;
    const items: Obligation[] = [];
    let after = page.after === undefined ? undefined : index + page.after;
    let read = 0;
    for (;;) {
      const chunk = await this.store.page<number>(index, { after, limit: Math.min(page.limit, PAGE_SCAN_MAX - read) });
      const found = await Promise.all(chunk.items.map(([key, tick]) => this.store.get<Obligation>(obligationKey(tick, party, key.slice(index.length)))));
      for (const [k, [key]] of chunk.items.entries()) {
        read++;
        after = key;
        const o = found[k];
        if (o !== undefined && (which === 'all' || o.state === which)) items.push(o);
        const more = k < chunk.items.length - 1 || chunk.next !== null;
        if (items.length === page.limit || read === PAGE_SCAN_MAX) return { items, next: more ? key.slice(index.length) : null };
      }
      if (chunk.next === null) return { items, next: null };
    }
  }

  /** A party's obligation: where its id index says it is stored. */
  async obligation(party: string, id: string): Promise<Obligation | undefined> {
    const tick = await this.store.get<number>(TABLES.obligationTick.prefix + scoped(party, id));
    return tick === undefined ? undefined : this.store.get<Obligation>(obligationKey(tick, party, id));
  }

  /** A page of a table's records in id order; the cursor is an id. */
  async list<T>(prefix: string, page: { after?: string | undefined; limit: number }): Promise<Page<[string, T]>> {
    const r = await this.store.page<T>(prefix, { after: page.after === undefined ? undefined : prefix + page.after, limit: page.limit });
    return { items: r.items.map(([k, v]) => [k.slice(prefix.length), v]), next: r.next === null ? null : r.next.slice(prefix.length) };
  }

  parties(page: { after?: string | undefined; limit: number }): Promise<Page<[string, Party]>> {
    return this.list<Party>(TABLES.party.prefix, page);
  }

  /**
   * A page of recorded intents, the most recent first, before the log index `before`
   * (exclusive): what a dry run judges. The cursor is a log index.
   */
  async recorded(page: { before?: number | undefined; limit: number }): Promise<Page<TransactionRecord> & { nextBefore: number | null }> {
    const r = await this.store.page<TransactionRecord>(TABLES.recorded.prefix, {
      reverse: true, limit: page.limit, ...(page.before === undefined ? {} : { after: recordedKey(page.before) }),
    });
    const nextBefore = r.next === null ? null : parseInt(r.next.slice(TABLES.recorded.prefix.length), 16);
    return { items: r.items.map(([, record]) => record), next: nextBefore === null ? null : String(nextBefore), nextBefore };
  }
}
