/**
 * @apl/client: the TypeScript SDK of the agent-plane ledger.
 *
 * - `AgentClient`: the agent plane. `submitIntent` does the specification's retry
 *   loops (the policy pin, 503 commit_unavailable, 421 not_primary); the reads are
 *   party-scoped by the attestation and refused locally without one.
 * - `AdminClient`: the administrative plane, one method per route.
 * - Types generated from the node's OpenAPI documents (`AgentPlane`, `AdminPlane`);
 *   128-bit integers are `bigint` both ways.
 * - One error class per error code (`StalePolicyError`, `NotPrimaryError`, ...),
 *   all `ApiError`s carrying the status and the body.
 *
 * It imports no other package of the project and has no dependency: it installs alone.
 */
export { AgentClient, PIN_ATTEMPTS_MAX, attestationSubject, newTransactionId } from './agent.js';
export type {
  AccountBalance, AgentClientOptions, Consistency, IntentEnvelope, IntentInput, ObligationList, ObligationState, Outcome, Policy,
  ReadOptions, Submission, TransactionView, UsageReport,
} from './agent.js';
export { AdminClient } from './admin.js';
export type {
  AdminAccount, AdminClientOptions, AdminPolicy, AdminUsageReport, Binding, Cluster, Digest, DryRunReport, ExportOptions, Party,
  MembershipChange, PolicyList, Transfer, TrustRoot,
} from './admin.js';
export type { FeedHeartbeat, FeedOptions, FeedRecord } from './feed.js';
export { ApiError, NoAttestationError, TransportError, UnexpectedResponseError, type ErrorBodyOf, type ErrorExtras } from './errors.js';
export * from './generated/contract.js';
export type * as AgentPlane from './generated/agent-plane.js';
export type * as AdminPlane from './generated/admin-plane.js';
export { parseJson, stringifyJson } from './json.js';
export { Transport, type Answer, type TransportOptions } from './transport.js';
