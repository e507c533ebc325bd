/**
 * Dry run: how a draft bundle would have judged recorded intents. It is read-only
 * and runs on one replica, outside the log: the node reads a page of recorded intents
 * (the most recent first, in pages of at most DRY_RUN_PAGE_MAX) and judges it here.
 *
 * The draft's rules are evaluated against the facts each intent was judged on (its
 * party, action, legs, usage moves, evidence and commit tick). An intent that named
 * an obligation, or that a repair duty blocked, was decided by obligations rather
 * than by rules; it is counted, not re-judged. An intent whose legs are in several
 * currencies, of an action the draft marks single_currency, would be refused before
 * judgement (422, nothing recorded): it is listed with that refusal.
 */
import { compileBundle, bundleHash, type BundleIssue } from './policy/bundle.js';
import { singleCurrencyRefusal } from './intent.js';
import { judgeByRules } from './policy/evaluate.js';
import type { TransactionRecord, Verdict } from './state.js';

/** The most recorded intents one dry-run request judges. */
export const DRY_RUN_PAGE_MAX = 1000;

export interface DryRunChange {
  transaction: string;
  party: string;
  recorded: Verdict;
  would_be: Verdict;
  winning_rule: string;
  basis?: string;
}

/** A recorded intent the draft would refuse before judging it: nothing would be recorded. */
export interface DryRunRefusal {
  transaction: string;
  party: string;
  recorded: Verdict;
  error: 'multi_currency_mandate_charge';
  message: string;
}

export interface DryRunReport {
  bundle_hash: string;
  /** evaluated counts the intents judged: unchanged, changed and refused together. */
  evaluated: number;
  unchanged: number;
  decided_by_obligations: number;
  changed: DryRunChange[];
  refused: DryRunRefusal[];
}

/**
 * Judges `records` (a page of recorded intents) by the bundle's rules; `policyId` is the
 * id its bases name (the policy dry-run, whatever its state), or `(draft)` for a bundle
 * that is no policy yet.
 */
export function dryRun(records: readonly TransactionRecord[], bundle: unknown, policyId = '(draft)'): { ok: true; report: DryRunReport } | { ok: false; issues: BundleIssue[] } {
  const compiled = compileBundle(bundle);
  if (!compiled.ok) return compiled;
  const draft = { id: policyId, compiled: compiled.bundle };
  const report: DryRunReport = { bundle_hash: bundleHash(bundle), evaluated: 0, unchanged: 0, decided_by_obligations: 0, changed: [], refused: [] };
  for (const r of records) {
    const recorded = r.outcome.verdict;
    if (r.action.bindings.obligation !== undefined || recorded === 'RepairOutstandingRejected') {
      report.decided_by_obligations += 1;
      continue;
    }
    report.evaluated += 1;
    const refusal = singleCurrencyRefusal(draft, r.action.action, r.entries);
    if (refusal !== null) {
      report.refused.push({ transaction: r.transaction, party: r.party, recorded, error: 'multi_currency_mandate_charge', message: refusal });
      continue;
    }
    const j = judgeByRules(draft, {
      party: r.party, agent: r.agent, action: r.action.action, bindings: r.action.bindings, entries: r.entries,
      moves: r, evidence: r.evidence, tick: r.outcome.provenance.tick,
    });
    if (j.verdict === recorded) {
      report.unchanged += 1;
      continue;
    }
    report.changed.push({
      transaction: r.transaction, party: r.party, recorded, would_be: j.verdict, winning_rule: j.winning_rule,
      ...(j.basis === undefined ? {} : { basis: j.basis }),
    });
  }
  return { ok: true, report };
}
