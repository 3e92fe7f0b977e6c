#!/usr/bin/env bash
# Tests that share one process: a group of checks run in one go (one launch of a distributed
# worker for many scenarios, one run of a doctest binary for all of its cases), and each check's
# own test judged from what that run wrote. A process that loads libtorch costs 0.8 s of CPU
# before its first check, most of what a small one costs (docs/dev/test-suite.md).
#   batch.sh run PREFIX CMD [ARGS...]
#     the group's fixture test: runs CMD with ACCEL_BATCH_RESULTS=PREFIX; each of its processes
#     appends "NAME passed" to PREFIX.rank<RANK> for each check that passed (run_scenario.hpp's
#     --batch, unit/test_main.cpp's listener). Fails only when CMD exits 64: the group could not
#     be run at all (an unknown name, a file it could not write). A check that failed in it is
#     its own test's failure, below.
#   batch.sh check PREFIX RANKS NAME CMD [ARGS...]
#     one check's test: passes when each of its RANKS ranks wrote "NAME passed"; otherwise runs
#     CMD (the check alone, in processes of its own, as it ran before groups) and passes or fails
#     with it, so that a failure shows the check's own output.
#   batch.sh clean PREFIX
#     the fixture's cleanup: no result outlives its ctest run.
set -u
mode=$1 prefix=$2; shift 2
case $mode in
  run)
    rm -f "$prefix".rank*
    mkdir -p "$(dirname "$prefix")"
    ACCEL_BATCH_RESULTS=$prefix "$@"
    status=$?
    passed=$(wc -l <"$prefix.rank0" 2>/dev/null || echo 0)
    echo "batch: $passed passed on rank 0 (exit $status); each one's own test judges it," \
         "running it alone unless every rank passed it here"
    [ $status -ne 64 ]
    ;;
  check)
    ranks=$1 name=$2; shift 2
    for ((rank = 0; rank < ranks; ++rank)); do
      if ! grep -Fqx -- "$name passed" "$prefix.rank$rank" 2>/dev/null; then
        echo "batch: '$name' did not pass on rank $rank in its group ($prefix.rank$rank);" \
             "running it alone: $*"
        exec "$@"
      fi
    done
    echo "batch: '$name' passed on all $ranks rank(s) in its group ($prefix.rank*)"
    ;;
  clean)
    rm -f "$prefix".rank*
    ;;
  *)
    echo "batch.sh: unknown mode '$mode' (run, check or clean)" >&2
    exit 2
    ;;
esac
