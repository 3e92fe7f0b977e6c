#!/usr/bin/env bash
# Tests that share one process: a group of checks run in one go (one launch of a distributed
# worker for many scenarios, one run of a doctest binary for all of its cases), and each check's
# own test judged from what that run wrote. A process that loads libtorch costs 0.8 s of CPU
# before its first check, most of what a small one costs (docs/dev/test-suite.md).
# The rules: docs/dev/testing.md.
#   batch.sh run PREFIX CMD [ARGS...]
#     the group's fixture test: runs CMD with ACCEL_BATCH_RESULTS=PREFIX; each of its processes
#     appends to PREFIX.rank<RANK>, in the order it runs them, a line "NAME started" before each
#     check and "NAME passed", "NAME failed" or "NAME skipped" after it (run_scenario.hpp's
#     --batch, which stops at the first failure; unit/test_main.cpp's listener). Fails only when
#     CMD exits 64: the group could not be run at all (an unknown name, a file it could not
#     write). A check that failed in it, or never ran, is its own test's failure, below.
#   batch.sh check PREFIX RANKS NAME CMD [ARGS...]
#     one check's test: passes when each of its RANKS ranks wrote "NAME passed"; is skipped
#     (exit 77, after running CMD to show why) when the others wrote "NAME skipped". Otherwise
#     it FAILS, saying on each rank whether the check failed there, started and never finished,
#     or never ran and which check stopped that rank's batch first; then it runs CMD (the check
#     alone, in processes of its own) for the check's own output and says how that went, and
#     still fails: a check that fails only after others in the same process is a failure too.
#   batch.sh clean PREFIX
#     the fixture's cleanup: no result outlives its ctest run.
set -u
mode=$1 prefix=$2; shift 2

# Where one rank's batch stopped, from its results file $1: the first check that did not pass.
stopped_at() {
  local file=$1 line name last_started=""
  if [ ! -s "$file" ]; then
    echo "no check ran there (no results in $file: see the batch test's output)"
    return
  fi
  while IFS= read -r line; do
    name=${line% *}
    case $line in
      *" failed") echo "'$name' failed there first"; return ;;
      *" started") last_started=$name ;;
      *" passed" | *" skipped") [ "$name" = "$last_started" ] && last_started="" ;;
    esac
  done <"$file"
  if [ -n "$last_started" ]; then
    echo "its process ended during '$last_started' (a crash, a signal, or the launcher ending" \
         "it after another rank failed)"
  else
    echo "its process ended after '${name}' without a failure recorded (see the batch test's" \
         "output)"
  fi
}

case $mode in
  run)
    rm -f "$prefix".rank*
    mkdir -p "$(dirname "$prefix")"
    ACCEL_BATCH_RESULTS=$prefix "$@"
    status=$?
    passed=$(grep -c ' passed$' "$prefix.rank0" 2>/dev/null)
    failed=$(grep -c ' failed$' "$prefix.rank0" 2>/dev/null)
    echo "batch: ${passed:-0} passed, ${failed:-0} failed on rank 0 (exit $status); each check's" \
         "own test judges it: any check that did not pass here on every rank fails its test"
    [ $status -ne 64 ]
    ;;
  check)
    ranks=$1 name=$2; shift 2
    problems=() skipped=0
    for ((rank = 0; rank < ranks; ++rank)); do
      file=$prefix.rank$rank
      if grep -Fqx -- "$name passed" "$file" 2>/dev/null; then
        continue
      elif grep -Fqx -- "$name skipped" "$file" 2>/dev/null; then
        skipped=$((skipped + 1))
      elif grep -Fqx -- "$name failed" "$file" 2>/dev/null; then
        problems+=("failed on rank $rank in its batch")
      elif grep -Fqx -- "$name started" "$file" 2>/dev/null; then
        problems+=("started on rank $rank and never finished: $(stopped_at "$file")")
      else
        problems+=("did not run on rank $rank: $(stopped_at "$file")")
      fi
    done
    if [ ${#problems[@]} -eq 0 ]; then
      if [ $skipped -gt 0 ]; then
        where="on all $ranks rank(s)"
        [ $skipped -lt "$ranks" ] && where="on $skipped of $ranks rank(s), passed on the others,"
        echo "batch: '$name' skipped $where in its group ($prefix.rank*); running it alone" \
             "for the reason: $*"
        "$@"
        exit 77
      fi
      echo "batch: '$name' passed on all $ranks rank(s) in its group ($prefix.rank*)"
      exit 0
    fi
    for problem in "${problems[@]}"; do echo "batch: '$name' $problem ($prefix.rank*)"; done
    echo "batch: running '$name' alone, for its own output: $*"
    "$@"
    alone=$?
    if [ $alone -eq 0 ]; then
      echo "batch: '$name' passed alone, but not in its batch: FAILED (a check that fails" \
           "after others in the same process, or that never ran, is a failure)"
    else
      echo "batch: '$name' FAILED, in its batch and alone (exit $alone)"
    fi
    exit 1
    ;;
  clean)
    rm -f "$prefix".rank*
    ;;
  *)
    echo "batch.sh: unknown mode '$mode' (run, check or clean)" >&2
    exit 2
    ;;
esac
