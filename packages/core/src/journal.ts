/**
 * The conservative law: the legs of an intent balance per currency, every leg
 * names an account the acting party may post to (its own, or a house account that
 * no party owns, such as a merchant's books or a clearing account), and no account
 * total leaves its 128-bit range. Planning checks everything before anything is
 * mutated.
 */
import { COUNTER_MAX } from './int128.js';
import type { Entry } from './schema.js';
import type { Account, CurrencyTotals, State } from './state.js';
import { compareBytes } from './policy/bundle.js';

/** A leg resolved to its account, ready to post. */
export interface PostingPlan {
  account: Account;
  entry: Entry;
}

/** Debit and credit sums of an intent's legs per currency, in byte order of currency. */
export function legTotals(entries: readonly Entry[]): Map<string, CurrencyTotals> {
  const sums = new Map<string, CurrencyTotals>();
  for (const e of entries) {
    const t = sums.get(e.amount.currency) ?? { debits: 0n, credits: 0n };
    if (e.side === 'Debit') t.debits += e.amount.minor;
    else t.credits += e.amount.minor;
    sums.set(e.amount.currency, t);
  }
  return new Map([...sums].sort(([a], [b]) => compareBytes(a, b)));
}

/** Plans the postings of an intent by `party`, or names the first law they break. */
export function planPostings(state: State, party: string, entries: readonly Entry[]): { ok: true; plans: PostingPlan[] } | { ok: false; message: string } {
  // Every currency that does not balance is named, so that one answer says all there is to fix.
  const unbalanced: string[] = [];
  for (const [currency, t] of legTotals(entries)) {
    if (t.debits !== t.credits) unbalanced.push(`in ${currency}: ${t.debits} debited, ${t.credits} credited`);
  }
  if (unbalanced.length > 0) return { ok: false, message: `Debits and credits do not balance ${unbalanced.join('; ')}.` };
  const plans: PostingPlan[] = [];
  const after = new Map<string, bigint>();
  for (const entry of entries) {
    const account = state.accounts.get(entry.account);
    if (!account || (account.party !== null && account.party !== party)) {
      // The same words whether the account is missing or another party's: the
      // message is not an oracle for what exists.
      return { ok: false, message: `Account ${entry.account} cannot be posted to by this agent.` };
    }
    const key = `${entry.account}\u0000${entry.amount.currency}\u0000${entry.side}`;
    const base = after.get(key) ?? sideTotal(totalsOf(account, entry.amount.currency), entry.side);
    const total = base + entry.amount.minor;
    if (total > COUNTER_MAX) {
      // A house account's totals are every party's business together: the agent that
      // cannot read them (its reads answer 404) is not told them here either.
      const to = account.party === null ? '' : ` to ${total},`;
      return { ok: false, message: `Posting ${entry.amount.minor} ${entry.amount.currency} would bring the ${entry.side.toLowerCase()} total of account ${entry.account}${to} above the limit of ${COUNTER_MAX}.` };
    }
    after.set(key, total);
    plans.push({ account, entry });
  }
  return { ok: true, plans };
}

/** An account's totals in one currency (zero when it has none). */
export function totalsOf(account: Account, currency: string): CurrencyTotals {
  return account.totals.find(([c]) => c === currency)?.[1] ?? { debits: 0n, credits: 0n };
}

function sideTotal(t: CurrencyTotals, side: Entry['side']): bigint {
  return side === 'Debit' ? t.debits : t.credits;
}

/** Posts planned legs: each account touched gets new totals. Call only with plans `planPostings` returned for this state. */
export function commitPostings(state: State, plans: readonly PostingPlan[]): void {
  const next = new Map<string, { account: Account; totals: Map<string, CurrencyTotals> }>();
  for (const { account, entry } of plans) {
    let n = next.get(account.id);
    if (!n) next.set(account.id, (n = { account, totals: new Map(account.totals) }));
    const t = n.totals.get(entry.amount.currency) ?? { debits: 0n, credits: 0n };
    n.totals.set(entry.amount.currency, entry.side === 'Debit'
      ? { debits: t.debits + entry.amount.minor, credits: t.credits }
      : { debits: t.debits, credits: t.credits + entry.amount.minor });
  }
  for (const { account, totals } of next.values()) {
    state.accounts.set(account.id, { ...account, totals: [...totals].sort(([a], [b]) => compareBytes(a, b)) });
  }
}

/** The account balance view: per currency, in byte order of currency. */
export interface AccountView {
  account: string;
  party: string | null;
  balances: { currency: string; debits: bigint; credits: bigint; net: bigint }[];
}

export function accountView(a: Account): AccountView {
  return {
    account: a.id,
    party: a.party,
    balances: a.totals.map(([currency, t]) => ({ currency, debits: t.debits, credits: t.credits, net: t.debits - t.credits })),
  };
}
