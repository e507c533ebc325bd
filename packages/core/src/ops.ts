/**
 * Operations: the records of the replicated log. Each is versioned (`v`) and
 * validated by its schema when it is proposed and again when it is read back from
 * the log, so a replica never applies a record it cannot account for.
 *
 * An operation carries verified facts, never secrets: the gateway checks the
 * attestation's signature and expiry against the wall clock before proposing, and
 * the operation records who the issuer was, the token id and the capabilities it
 * granted. Replaying the log therefore never reads a clock.
 */
import { z } from 'zod';
import {
  AccountId, Action, ActionPattern, AgentUri, Comment, Currency, Entry, LIMITS, PartyId, PolicyId,
  Sha256Hex, TransactionId, UsageId, UsageMove,
} from './schema.js';
import { parseJson } from './json.js';
import { canonicalJson } from './canonical.js';
import { parseWith, type Parsed } from './parse.js';

export const ROLES = ['author', 'reviewer', 'approver', 'operator'] as const;
export type Role = (typeof ROLES)[number];

/** The administrative principal that proposed an operation. */
export const Principal = z.strictObject({
  name: z.string().min(1).max(128),
  roles: z.array(z.enum(ROLES)).max(ROLES.length),
});
export type Principal = z.output<typeof Principal>;

export const Issuer = z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]*$/, 'must be an issuer name (letters, digits, _ . : -)');

/** The facts the gateway verified from the attestation. */
export const Authority = z.strictObject({
  issuer: Issuer,
  key_id: z.string().min(1).max(128),
  token_id: z.string().min(1).max(256),
  capabilities: z.array(ActionPattern).max(LIMITS.capabilitiesCountMax),
});
export type Authority = z.output<typeof Authority>;

const v1 = z.literal(1);

/**
 * An intent's version. 2 counts an obligation with repair duties against the party's
 * limit as the duties its breach would create (intent.ts); 1 counted it once, so that
 * breaches could take a party past the limit. A log's intents of version 1 are judged
 * as they were, so that it replays and verifies the same.
 */
export const INTENT_VERSION = 2;

export const SubmitIntent = z.strictObject({
  type: z.literal('SubmitIntent'),
  v: z.union([v1, z.literal(INTENT_VERSION)]),
  transaction: TransactionId,
  agent: AgentUri,
  entries: z.array(Entry).max(LIMITS.entriesCountMax),
  consume_usage: UsageMove.optional(),
  meter_usage: UsageMove.optional(),
  bill_usage: UsageMove.optional(),
  action: Action,
  evidence: z.array(Sha256Hex).max(LIMITS.evidenceCountMax),
  justification_hash: Sha256Hex,
  policy: PolicyId,
  authority: Authority,
});
export type SubmitIntent = z.output<typeof SubmitIntent>;

export const Tick = z.strictObject({ type: z.literal('Tick'), v: v1 });

const admin = <K extends string, T extends z.core.$ZodLooseShape>(type: K, shape: T) =>
  z.strictObject({ type: z.literal(type), v: v1, by: Principal, ...shape });

export const AddTrustRoot = admin('AddTrustRoot', {
  issuer: Issuer,
  public_key: z.string().regex(/^k4\.public\.[A-Za-z0-9_-]{43}$/, 'must be a PASERK k4.public key'),
  key_id: z.string().regex(/^k4\.pid\.[A-Za-z0-9_-]{44}$/, 'must be a PASERK k4.pid'),
});
export const RemoveTrustRoot = admin('RemoveTrustRoot', { issuer: Issuer });
export const AddParty = admin('AddParty', { id: PartyId });
export const BindAgent = admin('BindAgent', { agent: AgentUri, party: PartyId });
export const UnbindAgent = admin('UnbindAgent', { agent: AgentUri });
export const OpenAccount = admin('OpenAccount', { id: AccountId, party: PartyId.optional() });
export const OpenUsage = admin('OpenUsage', { id: UsageId, currency: Currency, owner: PartyId.optional() });
export const DraftPolicy = admin('DraftPolicy', { id: PolicyId, bundle: z.unknown() });
export const ReviewPolicy = admin('ReviewPolicy', { id: PolicyId, comment: Comment.optional() });
export const ApprovePolicy = admin('ApprovePolicy', { id: PolicyId, comment: Comment.optional() });
export const ActivatePolicy = admin('ActivatePolicy', { id: PolicyId, comment: Comment.optional() });

export const Operation = z.discriminatedUnion('type', [
  SubmitIntent, Tick, AddTrustRoot, RemoveTrustRoot, AddParty, BindAgent, UnbindAgent,
  OpenAccount, OpenUsage, DraftPolicy, ReviewPolicy, ApprovePolicy, ActivatePolicy,
]);
export type Operation = z.output<typeof Operation>;
export type OperationType = Operation['type'];
export type AdminOperation = Exclude<Operation, { type: 'SubmitIntent' | 'Tick' }>;

/** Who may propose each administrative operation: any one of the listed roles. */
export const REQUIRED_ROLES: Record<AdminOperation['type'], readonly Role[]> = {
  AddTrustRoot: ['operator', 'author'],
  RemoveTrustRoot: ['operator', 'author'],
  AddParty: ['operator'],
  BindAgent: ['operator'],
  UnbindAgent: ['operator'],
  OpenAccount: ['operator'],
  OpenUsage: ['operator'],
  DraftPolicy: ['author'],
  ReviewPolicy: ['reviewer'],
  ApprovePolicy: ['approver'],
  ActivatePolicy: ['operator', 'approver'],
};

/** The bytes of an operation in the log: its canonical JSON, as UTF-8. */
export function encodeOperation(op: Operation): Uint8Array {
  return Buffer.from(canonicalJson(op), 'utf8');
}

/** The text of an operation's log bytes, read in place (no copy). */
export function operationText(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

/**
 * Reads an operation back from the text of its log bytes (`operationText`), validating
 * it. Callers keep the text as well (for the hash chain and the journal), so the bytes
 * are read once.
 */
export function decodeOperationText(text: string): Parsed<Operation> {
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (err) {
    return { ok: false, issues: [{ path: '', message: (err as Error).message }] };
  }
  return parseWith(Operation, value);
}

/** Validates an operation built in memory (the gateway's, or a test's). */
export function parseOperation(value: unknown): Parsed<Operation> {
  return parseWith(Operation, value);
}
