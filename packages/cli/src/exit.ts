/**
 * Exit codes scripts can test, and the advice printed with each failure: what went
 * wrong, then what to do next.
 *
 * | code | meaning |
 * |---|---|
 * | 0 | done (an intent: judged `Permitted` and posted) |
 * | 1 | an unexpected failure (a bug: please report it with the output) |
 * | 2 | the command line or the local setup is wrong (a flag, a file, no attestation, no token) |
 * | 3 | an intent was judged and refused by the policy: recorded, `posted` false |
 * | 4 | the node refused the request (an error answer 4xx: validation, authority, not found, conflict) |
 * | 5 | no usable answer: no node at the address, TLS, time-out, or 5xx / 503 after the retries |
 * | 6 | verification failed: the exported log does not check out, or it disagrees with the node's digest |
 */
import { ApiError, NoAttestationError, TransportError, UnexpectedResponseError, UnreadableAttestationError, type ErrorCode } from '@apl/client';

export const EXIT = {
  ok: 0,
  failure: 1,
  usage: 2,
  refused: 3,
  rejected: 4,
  unavailable: 5,
  mismatch: 6,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** A wrong flag, a missing file, a setup step not taken: exit 2, with what to do. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
  constructor(message: string, readonly hint?: string) {
    super(message);
  }
}

/** An exported log that does not verify, or disagrees with the node: exit 6; `body`, what was found, goes into --json's answer. */
export class MismatchError extends Error {
  override readonly name = 'MismatchError';
  constructor(message: string, readonly body?: object) {
    super(message);
  }
}

/**
 * A node's refusal met by a command that advises better than the general advice for
 * its code: `invalid_transition` from `apl cluster` is about membership, not a
 * policy's lifecycle. The exit code, the message and the body stay the refusal's.
 */
export class AdvisedError extends Error {
  override readonly name = 'AdvisedError';
  constructor(readonly refusal: ApiError, readonly hint: string) {
    super(refusal.message);
  }
}

/** Advice for a refusal: a text, or one chosen by the refusal (null: the general advice). */
export type Advice = string | ((refusal: ApiError) => string | null);

/** Runs `f`; a refusal whose code `hints` names is given that advice. */
export async function advising<T>(hints: Partial<Record<ErrorCode, Advice>>, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (err) {
    const advice = err instanceof ApiError ? hints[err.code as ErrorCode] : undefined;
    const hint = typeof advice === 'function' ? advice(err as ApiError) : advice;
    throw hint === undefined || hint === null ? err : new AdvisedError(err as ApiError, hint);
  }
}

const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ERR_TLS|ERR_SSL|EPROTO/;

export interface Failure {
  exit: ExitCode;
  /** code: the node's error code, or apl's own name for the failure. */
  code: string;
  message: string;
  hint: string | null;
  status?: number;
  body?: unknown;
}

/** What a failure means for the caller: its exit code, its message and the advice. */
export function failure(err: unknown, ctx: { caFile: string | null; tokensFile: string }): Failure {
  if (err instanceof AdvisedError) return { ...failure(err.refusal, ctx), hint: err.hint };
  if (err instanceof ApiError) {
    const exit = err.status >= 500 || err.code === 'not_primary' ? EXIT.unavailable : EXIT.rejected;
    return { exit, code: err.code, message: err.message, hint: apiHint(err, ctx), status: err.status, body: err.body };
  }
  if (err instanceof TransportError) return { exit: EXIT.unavailable, code: err.code, message: err.message, hint: transportHint(err, ctx) };
  if (err instanceof UnexpectedResponseError) {
    return { exit: EXIT.unavailable, code: 'unexpected_response', message: err.message, hint: 'Is the address a node of the agent-plane ledger, and the right plane (agent or admin)?' };
  }
  if (err instanceof NoAttestationError) {
    return { exit: EXIT.usage, code: 'no_attestation', message: `${err.what} needs an attestation, and none was given (nothing was sent).`, hint: 'Give the agent\'s attestation with --attestation or APL_ATTESTATION; `apl agent attest` mints a development one.' };
  }
  if (err instanceof UnreadableAttestationError) {
    return { exit: EXIT.usage, code: 'unreadable_attestation', message: err.message, hint: 'Check the token given with --attestation or APL_ATTESTATION (`apl agent attest` mints a development one), or name the agent with --agent.' };
  }
  if (err instanceof UsageError) return { exit: EXIT.usage, code: 'usage', message: err.message, hint: err.hint ?? null };
  if (err instanceof MismatchError) return { exit: EXIT.mismatch, code: 'mismatch', message: err.message, hint: null, ...(err.body ? { body: err.body } : {}) };
  const e = err as Error;
  return { exit: EXIT.failure, code: 'internal', message: e?.stack ?? String(err), hint: 'This is a bug in apl; please report it with this output.' };
}

function transportHint(err: TransportError, ctx: { caFile: string | null }): string {
  if (err.code === 'ECONNREFUSED') {
    return 'Start a node (npm start), or point apl at a running one with --agent-url / --admin-url (APL_AGENT_URL, APL_ADMIN_URL).';
  }
  // Alerts the node sent about the client's side of the handshake, not its own certificate.
  if (/ALERT_CERTIFICATE_REQUIRED/.test(err.code)) {
    return 'The node asks for a client certificate (its admin_client_certs): give yours with --cert and --key (APL_CERT, APL_KEY); certs/dev-certs.sh <certs-dir> --client <name> makes one from the cluster\'s CA.';
  }
  if (/ALERT_(UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN)/.test(err.code)) {
    return 'The node refused the client certificate given with --cert: it must be signed by the CA the node trusts (its tls.ca).';
  }
  if (TLS_CODES.test(err.code)) {
    return `The node's certificate is not trusted with ${ctx.caFile ?? 'the system\'s CAs'}: give its CA with --ca (APL_CA); a development node's is <data-dir>/certs/ca.pem.`;
  }
  if (err.code === 'ETIMEDOUT') return 'The node did not answer in time: check that it is up and ready (GET /readyz on the agent plane).';
  return 'Check the address and that the node is up.';
}

/** Where to see what exists already: the command that shows it, by the kind the message names. */
function existsHint(err: ApiError): string {
  const given = (err.body as { id?: unknown }).id;
  const id = typeof given === 'string' ? given : '<id>';
  const shows: [RegExp, string][] = [
    [/^Trust root /, 'apl admin trust-root list'],
    [/^Party /, 'apl admin party list'],
    [/^Agent binding /, 'apl admin agent list'],
    [/^Account /, `apl admin account show ${id}`],
    [/^Usage balance /, `apl admin usage show ${id}`],
    [/^Policy /, `apl admin policy show ${id}`],
  ];
  const command = shows.find(([re]) => re.test(err.message))?.[1];
  return command === undefined ? 'It exists already; nothing was changed.' : `It exists already; nothing was changed. ${command} shows it.`;
}

function apiHint(err: ApiError, ctx: { tokensFile: string }): string | null {
  const issues = (err.body as { issues?: { path: string; message: string }[] }).issues;
  switch (err.code) {
    case 'unauthorized':
      return `The admin token was refused: check --as and the tokens file (${ctx.tokensFile}), or --token.`;
    case 'forbidden':
      // Four eyes: the principal has the role, but took an earlier step of this policy.
      if (/must not be its author|must be neither its author/.test(err.message)) return 'Four eyes: another principal must take this step: --as <name> (a development node has dev-author, dev-reviewer and dev-approver).';
      return 'Act as a principal with that role: --as <name> (on a development node dev-author is the author and the operator, who may also read the feed; dev-reviewer the reviewer; dev-approver the approver).';
    case 'unknown_agent':
      return 'Bind the agent to a party (apl admin agent bind <agent-uri> <party>) and present its attestation (--attestation or APL_ATTESTATION; apl agent attest mints one).';
    case 'attestation':
      return 'Mint a fresh attestation (apl agent attest), from an issuer that is a trust root (apl admin trust-root list).';
    case 'capability_mapping':
      return 'Mint an attestation that grants the action: apl agent attest --cap <capability,...>.';
    case 'no_active_policy':
    case 'unknown_policy':
      return 'If no policy is in force: apl dev init makes one, or activate one with apl admin policy activate <id>. Otherwise check the id (apl admin policy list).';
    case 'stale_policy':
    case 'policy_pin_mismatch':
      return `The policy in force changed during each of ${err.attempts} attempt(s); nothing was recorded. Submit again.`;
    case 'substrate_rejected':
      return 'Nothing was recorded: the whole intent, legs included, is refused. Correct it and submit again.';
    case 'already_exists':
      return existsHint(err);
    case 'commit_unavailable':
      // An intent's (submitIntent put its id on the error), or a read's or an admin write's.
      if (err.transaction !== undefined) return `The commit could not be confirmed and the intent may have landed: submit again with --transaction ${err.transaction}, or read it with apl agent tx ${err.transaction}.`;
      return 'The replica could not confirm it in time, or cannot serve now; an admin write may have landed. Retry shortly, or ask another replica: give every replica\'s address, comma-separated (--agent-url / --admin-url).';
    case 'not_primary':
      return 'No configured replica could take the write: give every replica\'s address, comma-separated (--agent-url / --admin-url).';
    case 'invalid_transition':
      return 'Policies go draft, reviewed, approved, active, each step by a different principal: apl admin policy show <id> tells where it is.';
    case 'malformed_request':
    case 'invalid_policy':
      return issues && issues.length > 0 ? issues.map((i) => `${i.path || '(body)'}: ${i.message}`).join('\n') : null;
    case 'unknown_transaction':
    case 'unknown_account':
    case 'unknown_usage':
      // The same code on both planes: an admin read sees everything, an agent's what its party may.
      return 'Check the id (an agent\'s read answers this too for what its party may not see).';
    default:
      return null;
  }
}
