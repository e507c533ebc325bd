// tap's coverage map: which source files each test file's coverage is recorded for.
// V8's block counters make a process that records coverage much slower (the fuzz test
// takes 52 s with them and 36 s without, on two CPUs of an AMD EPYC at 2.1 GHz), and
// the suite's test processes and the nodes they start share two CPUs. Some files
// therefore run without coverage, where what they run is covered elsewhere or is not
// the packages' code:
// - the Raft simulations (many seeded runs of a three-node group, and the mutants the
//   checker must catch), two to three times slower with coverage; the Raft package's
//   unit and scenario tests cover what they run;
// - files that start node processes again and again (the compose cluster as local
//   processes, crashes at random points, membership changes, the chaos run, and the
//   clusters of three that elect, forward, stop gracefully, check certificates,
//   reject a duplicate member, serve the feed and run apl), for paths the in-process
//   tests and the other process tests cover (and a process killed with SIGKILL
//   records no coverage); their processes start without tap's module-recording hook
//   too (scripts/test-loader.mjs), about 0.6 s a start. The cluster fault,
//   catch-up and overload tests run without it too, though the store stream, the
//   held log and the listeners' timeouts are reached only there, and so count as not
//   covered: their nodes took a third more CPU with it (the catch-up test 84 CPU
//   seconds against 58), and the fault and overload tests, which time failovers and
//   latencies, run alone, so that all coverage added to them was added to the suite's
//   time (the node package's lines went from 96.2 % to 95.5 % covered, its branches
//   from 91.2 % to 90.1 %; the suite from 14:00 to 13:37);
// - the fuzz test: ten thousand requests to an in-process node, whose error paths the
//   planes' own tests reach one by one;
// - the tests of the benchmarks and of the scripts' command lines (test/bench-*,
//   test/script-args), whose code is not the packages', and the
//   architecture test, which reads and compiles the sources without running them.
// Every other test file records coverage of every file (an empty list). The gate on
// what the rest reaches is scripts/coverage-gate.mjs.
const UNCOVERED = new RegExp(
  '^(' +
    [
      'packages/raft/src/sim/(seeds-[a-z]|mutants)',
      'test/system/(chaos|cluster|cluster-faults|cluster-membership|crash|overload)',
      'test/process/(cli-cluster|cluster-catchup|cluster-deploy|cluster-duplicate|cluster-feed|cluster-tls|graceful-stop|membership-reuse)',
      'test/fuzz',
      'test/bench-[a-z]+',
      'test/script-args',
      'test/architecture',
    ].join('|') +
    ')\\.test\\.ts$',
);

export default (testFile) => (UNCOVERED.test(testFile) ? null : []);
