#!/usr/bin/env bash
# Fault tolerance end to end (docs/how-to/fault-tolerance.md): a two-process run with async checkpoints
# every 2 steps and --resume, under accel-launch --max-restarts 1, has one rank killed with
# SIGKILL as it begins a chosen step (ACCEL_EXAMPLE_KILL_AT, examples/common/fault_injection.hpp):
#   1:5  rank 1, just after the save of step 4 began: during its background write, and after
#        the commit of step 2's (a save waits for the commit before it), so the restart resumes
#   0:7  rank 0, just after the save of step 6 began: the same on the main process
#   0:3  rank 0, just after the first save began: the restart may find nothing committed, and
#        then starts afresh
# and two kills drawn from fixed seeds (bash's RANDOM: a rank, and a step from 2 to 8), printed,
# so that a failure reproduces. From step 5 on a commit exists (the save of step 4 or later
# waited for step 2's), so the restart must resume from one.
# The launcher starts both ranks again, they resume from the newest committed checkpoint, and the
# run ends with the param_digest of the uninterrupted run; no staging folder is left and every
# checkpoint_<n> is committed.
#   kill-resume.sh LAUNCHER GPT [ARGS...]   (ARGS: the model and batch of every run)
set -euo pipefail
launcher=$1 gpt=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
digest() { grep -o 'param_digest=[0-9a-f]*' <<<"$1" || true; }
fail() { echo "kill-resume.sh: $*" >&2; exit 1; }
steps=8
straight=$("$launcher" --nproc 2 -- "$gpt" --steps $steps "$@" 2>&1) || {
  printf '%s\n' "$straight"; fail "the uninterrupted run failed"; }
want=$(digest "$straight")
[ -n "$want" ] || { printf '%s\n' "$straight"; fail "no param_digest in the uninterrupted run"; }
for kill in 1:5 0:7 0:3 seed:1 seed:8; do
  if [ "${kill%%:*}" = seed ]; then
    RANDOM=${kill#seed:}
    kill="$((RANDOM % 2)):$((2 + RANDOM % (steps - 1)))"
  fi
  ck="$dir/ck-${kill/:/-}"
  out=$(ACCEL_EXAMPLE_KILL_AT=$kill "$launcher" --nproc 2 --max-restarts 1 -- "$gpt" \
          --steps $steps --checkpoint-dir "$ck" --checkpoint-every 2 --async-checkpoint --resume \
          "$@" 2>&1) || { printf '%s\n' "$out"; fail "the run killed at $kill did not complete"; }
  printf -- '--- rank:step %s killed\n%s\n' "$kill" "$out"
  grep -q "restart 1 of 1" <<<"$out" || fail "$kill: the launcher did not restart the group"
  if [ "${kill#*:}" -ge 5 ]; then
    grep -Eq "resumed from $ck/checkpoint_[0-9]+ at step [2-6]$" <<<"$out" ||
      fail "$kill: the restarted run did not resume from a committed checkpoint"
  fi
  # The launcher's report: the killed rank, the step its main process had reached, where the
  # restart resumed (the step the example printed) and the difference, redone.
  report=$(grep -E "^accel-launch: restart 1: rank ${kill%%:*} \(pid [0-9]+\) failed first: killed by signal SIGKILL at step [0-9]+; start 2 " <<<"$out") ||
    fail "$kill: no restart report naming rank ${kill%%:*}"
  reached=$(sed -E 's/.* at step ([0-9]+);.*/\1/' <<<"$report")
  if grep -q "began afresh" <<<"$report"; then
    from=0
  else
    from=$(sed -E 's/.* resumed from step ([0-9]+) .*/\1/' <<<"$report")
    grep -Eq "resumed from $ck/checkpoint_[0-9]+ at step $from$" <<<"$out" ||
      fail "$kill: the report's step $from is not where the example resumed"
  fi
  grep -Eq ": $((reached - from)) steps? redone$" <<<"$report" ||
    fail "$kill: $report: not $reached - $from steps redone"
  grep -Eqx "accel-launch: 1 restart, $((reached - from)) steps? redone in all" <<<"$out" ||
    fail "$kill: no total"
  [ "$(digest "$out")" = "$want" ] ||
    fail "$kill: $(digest "$out") after the restart, $want uninterrupted"
  left=$(find "$ck" -name '.*.partial')
  [ -z "$left" ] || fail "$kill: staging folders left: $left"
  for checkpoint in "$ck"/checkpoint_*; do
    [ -f "$checkpoint/manifest.json" ] || fail "$kill: $checkpoint is not committed"
  done
done
echo "kill-resume.sh: $want after every kill and restart"
