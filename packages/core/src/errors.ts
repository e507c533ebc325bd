/**
 * The closed set of refusals the state machine can answer. A refusal is not a bug:
 * it is an input the ledger will not record, answered with a code and a plain
 * English message. The server maps each code to an HTTP status.
 */

export const CORE_ERROR_CODES = [
  // Agent plane.
  'unknown_agent',
  'attestation',
  'capability_mapping',
  'policy_pin_mismatch',
  'no_active_policy',
  'substrate_rejected',
  'multi_currency_mandate_charge',
  // Administrative plane.
  'already_exists',
  'unknown_party',
  'unknown_binding',
  'unknown_trust_root',
  'unknown_policy',
  'invalid_policy',
  'invalid_transition',
  'forbidden',
] as const;

export type CoreErrorCode = (typeof CORE_ERROR_CODES)[number];

/** An error body: `{error, message, ...extra}`. */
export interface LedgerError {
  error: CoreErrorCode;
  message: string;
  [extra: string]: unknown;
}

export type Result<T> = { ok: true; value: T } | { ok: false; error: LedgerError };

export function ok<T>(value: T): Result<T> {
  return { ok: true, value };
}

export function fail(error: CoreErrorCode, message: string, extra: Record<string, unknown> = {}): { ok: false; error: LedgerError } {
  return { ok: false, error: { error, message, ...extra } };
}

/** A substrate law was broken: 422 `substrate_rejected`, kind `validation`. */
export function substrate(message: string): { ok: false; error: LedgerError } {
  return fail('substrate_rejected', message, { kind: 'validation' });
}

/** A broken invariant: a bug, never an input. Crash loudly. */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(`invariant violated: ${message}`);
}
