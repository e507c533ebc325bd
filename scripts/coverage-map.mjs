// tap's coverage map: which source files each test file's coverage is recorded for.
// Some files run without coverage, because V8's block counters make them much slower
// and what they run is covered elsewhere:
// - the Raft simulations (many seeded runs of a three-node group, and the mutants the
//   checker must catch), two to three times slower with coverage; the Raft package's
//   unit and scenario tests cover what they run;
// - three files that start node processes again and again (the compose cluster as
//   local processes, crashes at random points, membership changes): 15, 8 and 9 s of
//   coverage on this host between them, for paths the in-process tests and the other
//   process tests cover (and a process killed with SIGKILL records no coverage).
// Every other test file records coverage of every file (an empty list).
const UNCOVERED = /^(packages\/raft\/src\/sim\/(seeds-[a-z]|mutants)|test\/system\/(cluster-deploy|crash|cluster-membership))\.test\.ts$/;

export default (testFile) => (UNCOVERED.test(testFile) ? null : []);
