#!/usr/bin/env bash
# harness.batch_rules: tests/batch.sh judges each check by what its group run recorded, on a
# made-up group of 2 ranks (no program of the project needed):
#   rank 0: a passed, b failed (the batch stops there);  rank 1: a passed, b started, then the
#   process ended;  c never ran;  d (a group of 1 rank) skipped.
# A check that failed in its group fails its test even when it passes alone; one that never ran
# fails naming where each rank's group stopped; a skip exits 77.
#   batch-rules.sh BATCH_SH
set -u
batch=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-batch-rules.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

# expect STATUS REGEX CMD...: CMD exits STATUS and its output matches REGEX.
expect() {
  local want=$1 regex=$2 output status; shift 2
  output=$("$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -Eq -- "$regex" <<<"$output"; then
    echo "FAIL: $* exited $status (expected $want), output matching '$regex' expected:"
    printf '%s\n' "$output" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: $* -> $status"
  fi
}

group=$work/group
# The made-up group: what run_scenario.hpp's --batch writes, and an exit status of 1.
record='printf "a started\na passed\nb started\nb failed\n" >"$ACCEL_BATCH_RESULTS.rank0"
        printf "a started\na passed\nb started\n" >"$ACCEL_BATCH_RESULTS.rank1"; exit 1'
expect 0 "1 passed, 1 failed on rank 0 \(exit 1\)" "$batch" run "$group" bash -c "$record"
expect 0 "'a' passed on all 2 rank" "$batch" check "$group" 2 a true
# Failed in the group, passes alone: the test fails all the same.
expect 1 "'b' failed on rank 0 in its batch" "$batch" check "$group" 2 b true
expect 1 "'b' started on rank 1 and never finished: its process ended during 'b'" \
  "$batch" check "$group" 2 b true
expect 1 "'b' passed alone, but not in its batch: FAILED" "$batch" check "$group" 2 b true
expect 1 "'b' FAILED, in its batch and alone \(exit 3\)" "$batch" check "$group" 2 b sh -c 'exit 3'
# Never ran: fails, naming the check that stopped each rank's group.
expect 1 "'c' did not run on rank 0: 'b' failed there first" "$batch" check "$group" 2 c true
expect 1 "'c' did not run on rank 1: its process ended during 'b'" "$batch" check "$group" 2 c true
# No results at all (the group's program never started): every check fails.
expect 1 "'a' did not run on rank 0: no check ran there" "$batch" check "$work/none" 2 a true
# A group that could not be run at all fails its own test.
expect 1 "exit 64" "$batch" run "$work/unusable" sh -c 'exit 64'

one=$work/one
expect 0 "1 passed, 0 failed" "$batch" run "$one" \
  sh -c 'printf "x started\nx passed\nd started\nd skipped\n" >"$ACCEL_BATCH_RESULTS.rank0"'
expect 77 "'d' skipped on all 1 rank\(s\) in its group.*no device" "$batch" check "$one" 1 d echo "no device"
expect 0 "'x' passed on all 1 rank" "$batch" check "$one" 1 x true
"$batch" clean "$one"
expect 1 "'x' did not run on rank 0" "$batch" check "$one" 1 x true

if [ $failures -ne 0 ]; then echo "batch-rules: $failures rule(s) broken"; exit 1; fi
echo "batch-rules: every rule holds"
