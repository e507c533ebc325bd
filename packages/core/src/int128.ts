/**
 * The integer ranges of the ledger. Money and usage are exact integers in minor
 * units, held as `bigint`; a value outside its range is refused with a clear error,
 * never wrapped or rounded.
 */

/** The largest amount of one journal leg: 2^127 - 1. Legs are positive. */
export const ENTRY_MINOR_MAX = (1n << 127n) - 1n;
/** The smallest usage delta: -2^127. A negative delta is a correction or a credit memo. */
export const DELTA_MIN = -(1n << 127n);
/** The largest usage delta: 2^127 - 1. */
export const DELTA_MAX = (1n << 127n) - 1n;
/** The largest running total (usage counters, account debit and credit totals): 2^128 - 1. */
export const COUNTER_MAX = (1n << 128n) - 1n;

/** Whether `n` lies in the closed range [lo, hi]. */
export function inRange(n: bigint, lo: bigint, hi: bigint): boolean {
  return n >= lo && n <= hi;
}
