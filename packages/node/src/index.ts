/**
 * @apl/node: the agent-plane ledger server. `main.ts` is the process; this module
 * exports what tests and tools build on.
 */
export { startNode, OPENAPI_FILES, type RunningNode } from './node.js';
export { loadConfig, ConfigSchema, ConfigError, envName, tlsFiles, tokensFile, type Config } from './config.js';
export { devSetup, loadPrincipals, writeDevTokens, CERT_SCRIPT } from './devsetup.js';
export { paserkId, toPaserk, verifyPaseto, Attestor } from './attest.js';
export { agentDocument, adminDocument, renderDocuments } from './openapi.js';
export { STATUS, type ErrorCode } from './errors.js';
export { createLogger, type Logger } from './log.js';
export type { AdminPrincipal } from './admin-plane.js';
export { LedgerStore, type SnapshotChunk, type StorePosition, type WrapDb } from './ledger-store.js';
export { applyBatch, type BatchEntry } from './apply-batch.js';
export { PEER_SERVICE, PeerMesh, ForwardFailed, ForwardRefused, certificateIdentity, compareIncarnations, parseIncarnation, type Incarnation, type MeshHandlers } from './peer/mesh.js';
export { Metrics } from './metrics.js';
export { agentFrontEnd } from './agent-front.js';
export type { AgentBackend, Answer } from './gateway.js';
export { limitedServer } from './listener.js';
export { LINGER_MS } from './http.js';
