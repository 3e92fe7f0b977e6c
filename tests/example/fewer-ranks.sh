#!/usr/bin/env bash
# A restart on fewer processes (docs/how-to/fault-tolerance.md): a two-process GPT run with
# checkpoints every 2 steps loses rank 1 at step 5; resumed on one process with the same
# accumulation, the global batch would halve, and the resume is refused, naming the GradAccum that
# keeps it; resumed on one process with --accum 2 it goes on from the newest checkpoint and ends
# within 1e-3 of the uninterrupted run's validation loss (the same samples make each optimizer
# step; bitwise equal on libtorch 1.13 here, but the order of the sums differs, so the
# test does not ask for it).
#   fewer-ranks.sh LAUNCHER GPT [ARGS...]   (ARGS: the model and batch of every run)
set -euo pipefail
launcher=$1 gpt=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "fewer-ranks.sh: $*" >&2; exit 1; }
loss() { grep -o 'val_loss=[0-9.]*' <<<"$1" | cut -d= -f2; }
steps=8
straight=$("$launcher" --nproc 2 -- "$gpt" --steps $steps "$@" 2>&1) || {
  printf '%s\n' "$straight"; fail "the uninterrupted run failed"; }
ck="$dir/ck"
status=0
out=$(ACCEL_EXAMPLE_KILL_AT=1:5 "$launcher" --nproc 2 -- "$gpt" --steps $steps \
        --checkpoint-dir "$ck" --checkpoint-every 2 "$@" 2>&1) || status=$?
[ "$status" = 137 ] || { printf '%s\n' "$out"; fail "the run that loses rank 1: status $status"; }

status=0
out=$("$launcher" --nproc 1 -- "$gpt" --steps $steps --checkpoint-dir "$ck" --checkpoint-every 2 \
        --resume "$@" 2>&1) || status=$?
[ "$status" != 0 ] || { printf '%s\n' "$out"; fail "a resume that halves the global batch ran"; }
grep -qF "accel: Options::checkpoints.resume: '$ck/checkpoint_1' was saved by 2 processes with GradAccum<1> (2 loader batches per optimizer step); this run has 1 process with GradAccum<1> (1 loader batch per optimizer step), so its global batch would change. Resume on 2 processes with GradAccum<1>, or keep 1 process with GradAccum<2>" <<<"$out" ||
  { printf '%s\n' "$out"; fail "not the global batch's error"; }
[ ! -e "$ck/checkpoint_2" ] || fail "the refused resume wrote a checkpoint"

out=$("$launcher" --nproc 1 -- "$gpt" --steps $steps --accum 2 --checkpoint-dir "$ck" \
        --checkpoint-every 2 --resume "$@" 2>&1) || { printf '%s\n' "$out"; fail "the resume on 1 process with --accum 2 failed"; }
grep -q "resumed from $ck/checkpoint_1 at step 4$" <<<"$out" || { printf '%s\n' "$out"; fail "did not resume from step 4"; }
want=$(loss "$straight") got=$(loss "$out")
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-3 && d > -1e-3) }' ||
  fail "val_loss $got on 1 process after the resume, $want uninterrupted on 2"
echo "fewer-ranks.sh: val_loss $got after resuming on 1 process with --accum 2, $want uninterrupted on 2"
