/**
 * The closed set of error codes the planes answer with, and the HTTP status of each.
 * The map is a Record over the union, so the compiler proves every code has a status.
 * Every error body is `{error, message, ...extra}`: no stack, no internal path.
 */
import type { CoreErrorCode, LedgerError } from '@apl/core';

const GATEWAY_ERROR_CODES = [
  'malformed_request',
  'invalid_usage_id',
  'invalid_agent_uri',
  'stale_policy',
  'unknown_transaction',
  'unknown_account',
  'unknown_usage',
  'request_timeout',
  'method_not_allowed',
  'expectation_failed',
  'payload_too_large',
  'rate_limited',
  'not_primary',
  'commit_unavailable',
  'gateway_error',
  'feed_unavailable',
  'unauthorized',
  'not_found',
  'internal_error',
  'http_version_not_supported',
] as const;

export type ErrorCode = CoreErrorCode | (typeof GATEWAY_ERROR_CODES)[number];

export const STATUS: Record<ErrorCode, number> = {
  malformed_request: 400,
  invalid_usage_id: 400,
  invalid_policy: 400,
  unknown_agent: 401,
  unauthorized: 401,
  attestation: 403,
  forbidden: 403,
  unknown_transaction: 404,
  unknown_account: 404,
  unknown_usage: 404,
  unknown_party: 404,
  unknown_binding: 404,
  unknown_trust_root: 404,
  unknown_policy: 404,
  not_found: 404,
  stale_policy: 409,
  policy_pin_mismatch: 409,
  no_active_policy: 409,
  already_exists: 409,
  invalid_transition: 409,
  method_not_allowed: 405,
  request_timeout: 408,
  payload_too_large: 413,
  expectation_failed: 417,
  rate_limited: 429,
  not_primary: 421,
  invalid_agent_uri: 422,
  capability_mapping: 422,
  multi_currency_mandate_charge: 422,
  substrate_rejected: 422,
  gateway_error: 422,
  internal_error: 500,
  commit_unavailable: 503,
  feed_unavailable: 503,
  http_version_not_supported: 505,
};

export interface ErrorBody {
  error: ErrorCode;
  message: string;
  [extra: string]: unknown;
}

/** A refusal to answer with; thrown inside handlers and turned into a response. */
export class ApiError extends Error {
  readonly body: ErrorBody;
  constructor(error: ErrorCode, message: string, extra: Record<string, unknown> = {}) {
    super(message);
    this.body = { error, message, ...extra };
  }
  get status(): number {
    return STATUS[this.body.error];
  }
  /** A failure the server did not expect: nothing internal is said. */
  static internal(): ApiError {
    return new ApiError('internal_error', 'The server could not complete the request.');
  }

  static from(e: LedgerError): ApiError {
    const { error, message, ...extra } = e;
    return new ApiError(error, message, extra);
  }
}
