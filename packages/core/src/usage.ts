/**
 * Usage balances: three running totals of a metered resource that must always keep
 * `0 <= billed <= metered <= consumed` (and stay within 128 bits).
 *
 * The moves of one intent are validated together against the combined post-state,
 * before anything is mutated: consume, meter and bill of the same amount in one
 * intent is lawful, and a negative delta is admitted exactly when the chain still
 * holds. Ownership is checked before currency, so a party that does not own a
 * balance learns nothing about it, not even whether it exists.
 */
import { COUNTER_MAX } from './int128.js';
import type { UsageMove } from './schema.js';
import type { State, Usage } from './state.js';

export type MoveKind = 'consume' | 'meter' | 'bill';

export interface UsageMoves {
  consume_usage?: UsageMove | undefined;
  meter_usage?: UsageMove | undefined;
  bill_usage?: UsageMove | undefined;
}

/** The post-state of one balance under the moves of an intent. */
export interface UsagePlan {
  usage: Usage;
  deltas: Record<MoveKind, bigint | null>;
  consumed: bigint;
  metered: bigint;
  billed: bigint;
}

const KINDS: [MoveKind, keyof UsageMoves][] = [
  ['consume', 'consume_usage'],
  ['meter', 'meter_usage'],
  ['bill', 'bill_usage'],
];

/**
 * Plans the usage moves of an intent by `party`: the post-state of every balance
 * they touch, or the message of the first law they break. Mutates nothing.
 */
export function planUsage(state: State, party: string, moves: UsageMoves): { ok: true; plans: UsagePlan[] } | { ok: false; message: string } {
  const plans = new Map<string, UsagePlan>();
  for (const [kind, field] of KINDS) {
    const move = moves[field];
    if (!move) continue;
    const usage = state.usages.get(move.usage);
    if (!usage || usage.owner === null || usage.owner !== party) {
      return { ok: false, message: `Usage balance ${move.usage} cannot be moved by this agent.` };
    }
    if (move.amount.currency !== usage.currency) {
      return { ok: false, message: `The ${kind} move is in ${move.amount.currency} but usage balance ${usage.id} is kept in ${usage.currency}.` };
    }
    let plan = plans.get(usage.id);
    if (!plan) {
      plan = { usage, deltas: { consume: null, meter: null, bill: null }, consumed: usage.consumed, metered: usage.metered, billed: usage.billed };
      plans.set(usage.id, plan);
    }
    plan.deltas[kind] = move.amount.minor;
  }
  for (const plan of plans.values()) {
    plan.consumed += plan.deltas.consume ?? 0n;
    plan.metered += plan.deltas.meter ?? 0n;
    plan.billed += plan.deltas.bill ?? 0n;
    const broken = chainBreak(plan);
    if (broken) return { ok: false, message: broken };
  }
  return { ok: true, plans: [...plans.values()] };
}

/**
 * The message for the law the plan breaks, or null when the chain holds. A counter
 * out of its range is named first (above the 128-bit limit, below zero); then the
 * links of the chain from the bottom up: metered <= consumed, then billed <= metered.
 */
function chainBreak(p: UsagePlan): string | null {
  const u = p.usage;
  const { consume, meter, bill } = p.deltas;
  if (p.consumed > COUNTER_MAX) {
    return `Consuming ${consume ?? 0n} would bring the consumed total to ${p.consumed}, above the limit of ${COUNTER_MAX}.`;
  }
  if (p.consumed < 0n) return `Consuming ${consume ?? 0n} would bring the consumed total to ${p.consumed}, below zero; ${u.consumed} is consumed.`;
  if (p.metered < 0n) return `Metering ${meter ?? 0n} would bring the metered total to ${p.metered}, below zero; ${u.metered} is metered.`;
  if (p.billed < 0n) return `Billing ${bill ?? 0n} would bring the billed total to ${p.billed}, below zero; ${u.billed} is billed.`;
  if (p.metered > p.consumed) {
    if (meter !== null && meter > 0n) {
      return `Metering ${meter} would bring the metered total to ${p.metered}, above the ${p.consumed} consumed; ` +
        `${u.metered} is already metered and ${p.consumed - u.metered} is consumed but not yet metered.`;
    }
    return `Consuming ${consume ?? 0n} would bring the consumed total to ${p.consumed}, below the ${p.metered} metered; ` +
      `${p.metered} is metered and ${u.consumed} was consumed.`;
  }
  if (p.billed > p.metered) {
    if (bill !== null && bill > 0n) {
      return `Billing ${bill} would bring the billed total to ${p.billed}, above the ${p.metered} metered; ` +
        `${u.billed} is already billed and ${p.metered - u.billed} is metered but not yet billed.`;
    }
    return `Metering ${meter ?? 0n} would bring the metered total to ${p.metered}, below the ${p.billed} billed; ` +
      `${p.billed} is billed and ${u.metered} was metered.`;
  }
  return null;
}

/** Applies planned moves. Call only with plans `planUsage` returned for this state. */
export function commitUsage(state: State, plans: UsagePlan[]): void {
  for (const p of plans) state.usages.set(p.usage.id, { ...p.usage, consumed: p.consumed, metered: p.metered, billed: p.billed });
}

/** The usage balance report of the agent plane and the admin plane. */
export interface UsageReport {
  usage: string;
  currency: string;
  consumed: bigint;
  metered: bigint;
  billed: bigint;
  unmetered: bigint;
  unbilled: bigint;
  reconciled: boolean;
  text: string;
}

export function usageReport(u: Usage): UsageReport {
  const unmetered = u.consumed - u.metered;
  const unbilled = u.metered - u.billed;
  const reconciled = u.consumed === u.metered && u.metered === u.billed;
  return {
    usage: u.id,
    currency: u.currency,
    consumed: u.consumed,
    metered: u.metered,
    billed: u.billed,
    unmetered,
    unbilled,
    reconciled,
    text: narrate(u, unmetered, unbilled, reconciled),
  };
}

/** The balance in plain compliance English, with exact figures. */
function narrate(u: Usage, unmetered: bigint, unbilled: bigint, reconciled: boolean): string {
  const head = `Usage balance ${u.id} (${u.currency}): ${u.consumed} consumed, ${u.metered} metered, ${u.billed} billed.`;
  if (reconciled) return `${head} Everything consumed is metered and billed. Reconciled.`;
  return `${head} ${unmetered} consumed but not yet metered; ${unbilled} metered but not yet billed. Not reconciled.`;
}

/** Whether a balance keeps its chain. An invariant of every committed state. */
export function chainHolds(u: Usage): boolean {
  return 0n <= u.billed && u.billed <= u.metered && u.metered <= u.consumed && u.consumed <= COUNTER_MAX;
}
