/**
 * What can go wrong, as classes a caller can branch on.
 *
 * - `ApiError` and its subclasses: the node answered with an error body
 *   `{error, message, ...extra}`. There is one subclass per error code of the
 *   OpenAPI documents (generated into generated/contract.ts: `StalePolicyError`,
 *   `NotPrimaryError`, `CommitUnavailableError`, ...), each carrying the HTTP status
 *   and the body. A code this SDK does not know (a newer node) is a plain `ApiError`.
 * - `NoAttestationError`: refused locally, before any request, because the call
 *   needs an attestation and none is configured.
 * - `UnreadableAttestationError`: refused locally, before any request, because an
 *   intent names no agent and its attestation does not say which (no `sub` to read).
 * - `TransportError`: no answer (connection refused, TLS, time-out).
 * - `UnexpectedResponseError`: an answer the contract does not describe.
 *
 * A judged refusal is not an error: it is an outcome with `posted` false.
 */

/** Extra fields of the codes that have them (specification, Errors; DESIGN §9). */
export interface ErrorExtras {
  stale_policy: { pinned: string; active: string | null };
  policy_pin_mismatch: { pinned: string; active: string | null };
  no_active_policy: { pinned: string; active: null };
  not_primary: { primary_client_addr: string | null };
  substrate_rejected: { kind: 'validation' };
  malformed_request: { issues?: { path: string; message: string }[] };
  invalid_policy: { issues?: { path: string; message: string }[] };
}

/** The body of an error answer with code C. */
export type ErrorBodyOf<C extends string> = { error: C; message: string; [extra: string]: unknown } & (C extends keyof ErrorExtras ? ErrorExtras[C] : unknown);

/** The node answered with an error. */
export class ApiError<C extends string = string> extends Error {
  override readonly name: string = 'ApiError';
  /** code is the body's `error`. */
  readonly code: C;
  /**
   * attempts is how many times the call was sent before this answer was given up
   * on: more than 1 after the pin loop (at most 3) or the 503 retries.
   */
  attempts = 1;
  /**
   * transaction is the id `submitIntent` sent the intent with (one it made when none
   * was given): a retry with it can never post twice.
   */
  transaction?: string;
  /**
   * retryAfterSeconds is the answer's `Retry-After` in whole seconds (a 429
   * `rate_limited` says when the agent's token is back), or null when it gave none.
   */
  retryAfterSeconds: number | null = null;

  constructor(readonly status: number, readonly body: ErrorBodyOf<C>) {
    super(body.message);
    this.code = body.error;
  }
}

/** A call that needs an attestation was made by a client that has none; nothing was sent. */
export class NoAttestationError extends Error {
  override readonly name = 'NoAttestationError';
  constructor(readonly what: string) {
    super(`${what} needs an attestation, and this client has none: give one as the attestation option (nothing was sent).`);
  }
}

/**
 * An intent without an agent URI whose attestation names none: the envelope's agent
 * is the attestation's `sub`, and this token is not a PASETO v4.public token with one.
 */
export class UnreadableAttestationError extends Error {
  override readonly name = 'UnreadableAttestationError';
  constructor() {
    super('The intent names no agent, and its attestation names none: it is not a PASETO v4.public token with a `sub` claim. Give the agent URI, or the agent\'s attestation (nothing was sent).');
  }
}

/** The request got no answer. `code` is the system's (ECONNREFUSED, ETIMEDOUT, a TLS code, ...). */
export class TransportError extends Error {
  override readonly name = 'TransportError';
  /** attempts, from `submitIntent`: how many times the intent was sent, as on ApiError. */
  attempts?: number;
  /** transaction is the id `submitIntent` sent the intent with, as on ApiError. */
  transaction?: string;
  constructor(readonly url: string, readonly code: string, message: string, options?: { cause?: unknown }) {
    super(`${url}: ${message}`, options);
  }
}

/** An answer the contract does not describe (not JSON where JSON was due, an undocumented status). */
export class UnexpectedResponseError extends Error {
  override readonly name = 'UnexpectedResponseError';
  /** attempts, from `submitIntent`: how many times the intent was sent, as on ApiError. */
  attempts?: number;
  /** transaction is the id `submitIntent` sent the intent with, as on ApiError. */
  transaction?: string;
  constructor(readonly status: number, readonly text: string, message: string) {
    super(message);
  }
}
