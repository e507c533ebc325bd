/**
 * @apl/core: the deterministic state machine of the agent-plane ledger.
 *
 * The server feeds committed log entries to `apply` in log order and answers each
 * waiting request with the result. Nothing in this package reads a clock, draws a
 * random number or performs I/O: the same log gives the same state, state hash and
 * ledger digest on every replica and on every replay.
 */
export * from './apply.js';
export * from './admin.js';
export * from './audit.js';
export * from './canonical.js';
export * from './dryrun.js';
export * from './errors.js';
export * from './int128.js';
export * from './intent.js';
export * from './journal.js';
export * from './memory-store.js';
export * from './json.js';
export * from './obligations.js';
export * from './ops.js';
export * from './parse.js';
export * from './patterns.js';
export * from './policy/bundle.js';
export * from './policy/conditions.js';
export * from './policy/evaluate.js';
export * from './reads.js';
export * from './records.js';
export * from './schema.js';
export * from './state.js';
export * from './store.js';
export * from './usage.js';
export * from './views.js';
