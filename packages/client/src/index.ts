/**
 * @apl/client: the TypeScript SDK of the agent-plane ledger.
 *
 * - `AgentClient`: the agent plane. `submitIntent` does the specification's retry
 *   loops (the policy pin, 503 commit_unavailable, 421 not_primary); the reads are
 *   party-scoped by the attestation and refused locally without one.
 * - `AdminClient`: the administrative plane, one method per route.
 * - Lists answer a page (`limit`, `after`, `next`); each has an `all...` twin, an
 *   async iterator over every page's items (pages.ts).
 * - Types generated from the node's OpenAPI documents (`AgentPlane`, `AdminPlane`);
 *   128-bit integers are `bigint` both ways.
 * - One error class per error code (`StalePolicyError`, `NotPrimaryError`, ...),
 *   all `ApiError`s carrying the status and the body.
 *
 * It imports no other package of the project and has no dependency: it installs alone.
 */
export { AgentClient, PIN_ATTEMPTS_MAX, attestationSubject, newTransactionId } from './agent.js';
export type {
  AccountBalance, AgentClientOptions, Consistency, IntentEnvelope, IntentInput, ObligationList, ObligationOptions, ObligationState, ObligationView, Outcome, Policy,
  ReadOptions, Submission, TransactionView, UsageReport,
} from './agent.js';
export { AdminClient } from './admin.js';
export type {
  AdminAccount, AdminClientOptions, AdminPolicy, AdminUsageReport, Binding, Cluster, Digest, DryRunReport, ExportOptions, Party,
  BindingList, MembershipChange, PartyList, PolicyList, Transfer, TrustRoot, TrustRootList,
} from './admin.js';
export { PAGE_LIMIT_MAX, pages, type Page, type PageOptions } from './pages.js';
export type { FeedHeartbeat, FeedOptions, FeedRecord } from './feed.js';
export { ApiError, NoAttestationError, TransportError, UnreadableAttestationError, UnexpectedResponseError, type ErrorBodyOf, type ErrorExtras } from './errors.js';
export * from './generated/contract.js';
export type * as AgentPlane from './generated/agent-plane.js';
export type * as AdminPlane from './generated/admin-plane.js';
export { parseJson, stringifyJson } from './json.js';
export { Transport, type Answer, type TransportOptions } from './transport.js';
