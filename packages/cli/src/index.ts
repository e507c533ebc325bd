/**
 * @apl/cli: the `apl` command line (bin/apl.mjs), and what the demo and the tests
 * build on: the run, the exit codes, the development bootstrap and the log check.
 */
export { program, run } from './program.js';
export { EXIT, failure, type ExitCode } from './exit.js';
export { DEFAULT_PLAN, EXAMPLE_POLICY, bootstrap, ensureIssuerKey, issuerFiles, mintAttestation, policySteps, type DevPlan, type DevPrincipals, type Made } from './dev.js';
export { describeOutcome, intentFrom } from './commands/agent.js';
export { verifyLive, type VerifyReport } from './commands/log.js';
export { Output, table, fields } from './output.js';
