// tap's coverage map: which source files each test file's coverage is recorded for.
// The Raft simulations (many seeded runs of a three-node group, and the mutants the
// checker must catch) run without coverage: V8's block counters make them two to three
// times slower, and the Raft package's unit and scenario tests cover what they run.
// Every other test file records coverage of every file (an empty list).
const UNCOVERED = /^packages\/raft\/src\/sim\/(seeds-[a-z]|mutants)\.test\.ts$/;

export default (testFile) => (UNCOVERED.test(testFile) ? null : []);
