/**
 * The agent plane: submit intents, and read what the attested party may see.
 *
 * `submitIntent` carries out the specification's Errors rules 3 and 4:
 *
 * 1. Pin loop. On 409 `stale_policy` or `policy_pin_mismatch` (the same meaning on
 *    every path), re-read the active policy and resubmit with the same transaction
 *    id and that policy as the pin. At most PIN_ATTEMPTS_MAX attempts; after the
 *    last, the last answer's error is thrown with `attempts` set.
 * 2. Commit unavailable. On 503 `commit_unavailable` the entry may or may not be in
 *    the log. Submission is idempotent, so the same envelope (same transaction id) is
 *    sent again, up to `commitRetries` times with a doubling delay; a later answer
 *    of the recorded outcome carries `Idempotent-Replayed: true`. If every retry is
 *    answered 503, the transaction is read: found, its outcome is returned; not
 *    found, or not told (a 421, a 503 or no answer to the read), the 503 is thrown,
 *    and the caller may retry later with the same id.
 * 3. Not primary. A 421 is followed across the configured replica addresses by the
 *    transport (see transport.ts), for every request.
 *
 * A judged refusal (HTTP 200, `posted` false) is an outcome, never an error: branch
 * on `verdict` and `posted`.
 */
import { randomBytes } from 'node:crypto';
import { call, query, seg } from './call.js';
import { ApiError, NoAttestationError, TransportError, UnexpectedResponseError, UnreadableAttestationError } from './errors.js';
import type { components, operations } from './generated/agent-plane.js';
import { CommitUnavailableError, INT128_PLANS, PolicyPinMismatchError, StalePolicyError } from './generated/contract.js';
import { assertRuntime, stringifyJson, type Plan } from './json.js';
import { pageQuery, pages, type PageOptions } from './pages.js';
import { Transport, type TransportOptions } from './transport.js';

type S = components['schemas'];
export type IntentEnvelope = S['IntentEnvelope'];
export type Outcome = S['Outcome'];
export type TransactionView = S['TransactionView'];
export type AccountBalance = S['AccountBalance'];
export type UsageReport = S['UsageReport'];
export type ObligationList = S['ObligationList'];
export type ObligationView = S['ObligationView'];
export type Policy = S['Policy'];
export type Consistency = 'linearizable' | 'local';
export type ObligationState = 'owed' | 'open' | 'breached' | 'discharged' | 'all';

/** An intent as the caller gives it: the envelope, with what the client can fill in left optional. */
export type IntentInput = Omit<IntentEnvelope, 'agent' | 'attestation' | 'transaction' | 'policy' | 'evidence'> & {
  /** agent defaults to the client's, or to the attestation's subject. */
  agent?: string;
  /** attestation defaults to the client's. */
  attestation?: string;
  /** transaction is the idempotency key; a fresh `txn_` id when absent. */
  transaction?: string;
  /** policy is the pin; the active policy, read first, when absent. */
  policy?: string;
  evidence?: string[];
};

export interface Submission {
  outcome: Outcome;
  /** replayed is true when the outcome had been recorded before this call's last send (Idempotent-Replayed, or read back). */
  replayed: boolean;
  /** attempts is the number of pins tried (1 to PIN_ATTEMPTS_MAX). */
  attempts: number;
  /** pins are the policy ids pinned, one per attempt. */
  pins: string[];
  /** posts counts every POST sent, 503 retries and sends to another replica included. */
  posts: number;
  /** readBack is true when the outcome was read with GET /transactions after 503 answers. */
  readBack: boolean;
}

export interface AgentClientOptions extends Omit<TransportOptions, 'urls'> {
  /** url is the agent-plane base URL, or one per replica. */
  url: string | readonly string[];
  /** attestation is the PASETO v4.public token presented with every call. */
  attestation?: string | undefined;
  /** agent is the agent URI of the envelopes; the attestation's `sub` when absent. */
  agent?: string | undefined;
  /** commitRetries is how often an intent answered 503 is sent again before its transaction is read (default 2). */
  commitRetries?: number;
  /** retryDelayMs is the first delay before such a retry; it doubles each time (default 200). */
  retryDelayMs?: number;
}

/**
 * The system codes of a request that never reached the node: no connection (refused,
 * no such host, no route), or a TLS handshake that failed (a certificate not
 * trusted). Such an intent cannot have landed.
 */
const NEVER_SENT = /^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|EPROTO)$|CERT|SELF_SIGNED|UNABLE_TO_|ERR_TLS|ERR_SSL/;

/** The specification's bound on the pin loop (Errors, rule 3; Limits, 5). */
export const PIN_ATTEMPTS_MAX = 3;

/** The decode plan of an operation's success body (undefined: it holds no 128-bit integer). */
const plan = (op: keyof operations): Plan | undefined => (INT128_PLANS.agent as Record<string, Plan>)[op];

/** A fresh transaction id: `txn_` and 128 random bits. */
export function newTransactionId(): string {
  return `txn_${randomBytes(16).toString('hex')}`;
}

/**
 * The `sub` claim of a PASETO v4.public token, read without verifying it (the node
 * verifies); null when the token cannot be read.
 */
export function attestationSubject(token: string): string | null {
  const m = /^v4\.public\.([A-Za-z0-9_-]+)(\.[A-Za-z0-9_-]*)?$/.exec(token);
  if (!m) return null;
  const signed = Buffer.from(m[1]!, 'base64url');
  if (signed.length <= 64) return null;
  try {
    const claims = JSON.parse(signed.subarray(0, signed.length - 64).toString('utf8')) as { sub?: unknown };
    return typeof claims.sub === 'string' ? claims.sub : null;
  } catch {
    return null;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class AgentClient {
  readonly transport: Transport;
  private readonly attestation: string | undefined;
  private readonly agent: string | undefined;
  private readonly commitRetries: number;
  private readonly retryDelayMs: number;

  constructor(o: AgentClientOptions) {
    assertRuntime();
    this.transport = new Transport({ ...o, urls: typeof o.url === 'string' ? [o.url] : o.url });
    this.attestation = o.attestation;
    this.agent = o.agent;
    this.commitRetries = o.commitRetries ?? 2;
    this.retryDelayMs = o.retryDelayMs ?? 200;
  }

  /** Submits an intent, with the pin loop and the 503 retries (see the module comment). */
  async submitIntent(intent: IntentInput): Promise<Submission> {
    const attestation = this.needAttestation('Submitting an intent', intent.attestation);
    const agent = intent.agent ?? this.agent ?? attestationSubject(attestation);
    if (agent === null) throw new UnreadableAttestationError();
    const transaction = intent.transaction ?? newTransactionId();
    // What cannot be sent (an integer number beyond 2^53) is refused before any request,
    // the active policy's read included.
    stringifyJson(intent);
    let pin = intent.policy ?? (await this.getActivePolicy({ attestation })).id;
    const pins: string[] = [];
    let posts = 0;
    // What the caller needs to retry safely, on any error once the intent was sent: the
    // id it went with, and how often it went.
    const stamped = (err: unknown): unknown => {
      if (err instanceof ApiError || err instanceof TransportError || err instanceof UnexpectedResponseError) {
        err.attempts = posts;
        err.transaction = transaction;
      }
      return err;
    };
    for (let attempt = 1; ; attempt++) {
      pins.push(pin);
      const envelope: IntentEnvelope = { ...intent, evidence: intent.evidence ?? [], agent, attestation, transaction, policy: pin };
      try {
        const r = await this.post(envelope, () => posts++);
        return { ...r, attempts: attempt, pins, posts };
      } catch (err) {
        const stale = err instanceof StalePolicyError || err instanceof PolicyPinMismatchError;
        if (!stale || attempt >= PIN_ATTEMPTS_MAX) throw stamped(err);
      }
      try {
        pin = (await this.getActivePolicy({ attestation })).id;
      } catch (err) {
        throw stamped(err);
      }
    }
  }

  /** One pin: the envelope sent, and sent again on 503 (same transaction id), then read back. */
  private async post(envelope: IntentEnvelope, counted: () => void): Promise<Omit<Submission, 'attempts' | 'pins' | 'posts'>> {
    let unavailable: Error | null = null;
    for (let retry = 0; retry <= this.commitRetries; retry++) {
      if (retry > 0) await sleep(this.retryDelayMs * 2 ** (retry - 1));
      try {
        const { value, answer } = await call<Outcome>(this.transport, 'POST', '/api/v1/intents', { body: envelope, plan: plan('submitIntent'), idempotent: true, sent: counted });
        return { outcome: value, replayed: answer.headers['idempotent-replayed'] === 'true', readBack: false };
      } catch (err) {
        // A 503, or an answer lost on the way back: the entry may be in the log.
        const maybeLanded = err instanceof CommitUnavailableError || (err instanceof TransportError && !NEVER_SENT.test(err.code));
        if (maybeLanded) unavailable = err;
        // Nothing sent this time, but an earlier send may have landed: that is what
        // the caller must hear about, after the retries and the read-back.
        else if (unavailable === null) throw err;
      }
    }
    let read: Outcome | null;
    try {
      read = await this.readBack(envelope);
    } catch (err) {
      // The read did not say either (no answer, a 421 or a 503 of its own, a body that is
      // not the transaction): the intent may or may not have landed, as the 503 said. The
      // read's own error would tell a caller that takes a 421 for "not recorded" to send
      // it again under a new id; it is kept as the cause (a lost answer's TransportError
      // says its socket's error in its code and message).
      (unavailable as Error).cause = err;
      throw unavailable!;
    }
    if (read === null) throw unavailable!;
    return { outcome: read, replayed: true, readBack: true };
  }

  /** The outcome of a transaction as recorded, or null when it is not (yet) there. */
  private async readBack(envelope: IntentEnvelope): Promise<Outcome | null> {
    try {
      const t = await this.getTransaction(envelope.transaction, { attestation: envelope.attestation });
      // The outcome is handed back as the answer to the intent: it must be the intent's.
      if (t === null || typeof t !== 'object' || t.transaction !== envelope.transaction || typeof t.verdict !== 'string' || typeof t.posted !== 'boolean') {
        const text = JSON.stringify(t, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) ?? String(t);
        throw new UnexpectedResponseError(200, text, `the read-back of ${envelope.transaction} answered a body that is not that transaction: ${text.slice(0, 200)}`);
      }
      return {
        transaction: t.transaction, verdict: t.verdict, posted: t.posted, policy: t.policy,
        obligations_pending: t.obligations_pending, justification_hash: t.justification_hash, provenance: t.provenance,
      };
    } catch (err) {
      if (err instanceof ApiError && err.code === 'unknown_transaction') return null;
      throw err;
    }
  }

  /** A committed transaction of the attested party and its provenance. */
  async getTransaction(id: string, o: ReadOptions = {}): Promise<TransactionView> {
    return this.read<TransactionView>(`/api/v1/transactions/${seg(id)}`, {}, o, 'getTransaction', 'Reading a transaction');
  }

  /** Debit, credit and net totals per currency of an account of the attested party. */
  async getAccountBalance(id: string, o: ReadOptions = {}): Promise<AccountBalance> {
    return this.read<AccountBalance>(`/api/v1/accounts/${seg(id)}/balance`, {}, o, 'getAccountBalance', 'Reading a balance');
  }

  /** One page of the attested party's obligations (`owed` by default: open ones and breached repair duties). */
  async listObligations(o: ObligationOptions = {}): Promise<ObligationList> {
    const q = pageQuery(o);
    if ((o.state ?? 'owed') === 'owed' && (q.limit !== undefined || q.after !== undefined)) {
      throw new RangeError('limit and after page the states open, breached, discharged and all; what is owed (the default state) is answered whole');
    }
    return this.read<ObligationList>('/api/v1/obligations', { state: o.state, limit: q.limit, after: q.after }, o, 'listObligations', 'Reading obligations');
  }

  /** Every obligation of the attested party in `state`, a page at a time from `after` on (pages.ts). */
  allObligations(o: ObligationOptions = {}): AsyncGenerator<ObligationView> {
    return pages((after) => this.listObligations({ ...o, after }), (p) => p.obligations, o.after);
  }

  /** The policy in force. */
  async getActivePolicy(o: ReadOptions = {}): Promise<Policy> {
    return this.read<Policy>('/api/v1/policies/active', {}, o, 'getActivePolicy', 'Reading the active policy');
  }

  /** A usage balance of the attested party; refused locally, before any request, without an attestation. */
  async getUsage(id: string, o: ReadOptions = {}): Promise<UsageReport> {
    return this.read<UsageReport>(`/api/v1/usages/${seg(id)}`, {}, o, 'getUsage', 'Reading a usage balance');
  }

  /** A usage balance narrated in plain English (`format=text`); refused locally without an attestation. */
  async getUsageText(id: string, o: ReadOptions = {}): Promise<string> {
    const attestation = this.needAttestation('Reading a usage balance', o.attestation);
    const path = `/api/v1/usages/${seg(id)}${query({ format: 'text', consistency: o.consistency })}`;
    return (await call<string>(this.transport, 'GET', path, { token: attestation, text: true })).value;
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.transport.close();
  }

  /** A party-scoped read: refused locally without an attestation, else sent with it as the bearer token. */
  private async read<T>(path: string, q: Record<string, string | number | undefined>, o: ReadOptions, op: keyof operations, what: string): Promise<T> {
    const token = this.needAttestation(what, o.attestation);
    const full = `${path}${query({ ...q, consistency: o.consistency })}`;
    return (await call<T>(this.transport, 'GET', full, { token, plan: plan(op) })).value;
  }

  private needAttestation(what: string, given: string | undefined): string {
    const a = given ?? this.attestation;
    if (a === undefined || a === '') throw new NoAttestationError(what);
    return a;
  }
}

/** Which obligations, and which page of them. */
export interface ObligationOptions extends ReadOptions, Omit<PageOptions, 'consistency'> {
  state?: ObligationState | undefined;
}

export interface ReadOptions {
  /** consistency: linearizable (the default) or local (this replica, without a round trip). */
  consistency?: Consistency | undefined;
  /** attestation overrides the client's for this call. */
  attestation?: string | undefined;
}
