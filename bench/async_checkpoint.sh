#!/usr/bin/env bash
# The training loop's stall per checkpoint, background (--async-checkpoint) against blocking
# saves, on the GPT example's 25.4M-parameter model (hidden 512, 8 blocks, seq 128, batch 4 per
# rank, AdamW) on 2 ranks (docs/how-to/fault-tolerance.md).
#
#   bench/async_checkpoint.sh [--steps N] [--every K] [--turns T] [--strategy S] [--build-dir DIR]
#                             [--dir FOLDER]
#
# Per turn (default 3) it runs the example three times, --steps N (default 40) each: without
# checkpoints, with a blocking save every K steps (default 5), and with a background save every K
# steps; the example's "trained N steps in X s" excludes evaluation and the final save. The cost
# of one save to the loop is (X with saves - X without) / saves: for blocking saves the whole
# save, for background ones the snapshot's copy plus whatever the write takes from the steps that
# run beside it. Printed: the medians, and the background cost as a share of the blocking one
# (target: at most 15%), and the mean step time of the background run against the run without
# saves (target: within 10%). --dir picks the checkpoint folder's disk (default: the build folder).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
steps=40
every=5
turns=3
strategy=ddp
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --strategy) strategy=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "async_checkpoint.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
gpt="$build_dir/examples/gpt/gpt"
[ -x "$gpt" ] || { echo "async_checkpoint.sh: build the gpt target first ($gpt)" >&2; exit 2; }
work=$(mktemp -d "${dir:-$build_dir}/async_checkpoint.XXXXXX")
trap 'rm -rf "$work"' EXIT
model=(--nproc 2 --strategy "$strategy" --layers 8 --hidden 512 --heads 8 --seq 128
       --batch-size 4 --steps "$steps" --eval-windows 64 --sample-tokens 0 --no-progress)
saves=$(( (steps - 1) / every ))

seconds() { grep -o 'trained [0-9]* steps in [0-9.]* s' <<<"$1" | awk '{print $5}'; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

none=() blocking=() background=()
for ((turn = 1; turn <= turns; ++turn)); do
  none+=("$(seconds "$("$gpt" "${model[@]}")")")
  rm -rf "$work/ck"
  blocking+=("$(seconds "$("$gpt" "${model[@]}" --checkpoint-dir "$work/ck" --checkpoint-every "$every")")")
  rm -rf "$work/ck"
  background+=("$(seconds "$("$gpt" "${model[@]}" --checkpoint-dir "$work/ck" --checkpoint-every "$every" --async-checkpoint)")")
  echo "turn $turn: ${none[-1]} s without saves, ${blocking[-1]} s blocking, ${background[-1]} s background ($saves saves)"
done
t0=$(printf '%s\n' "${none[@]}" | median)
tb=$(printf '%s\n' "${blocking[@]}" | median)
ta=$(printf '%s\n' "${background[@]}" | median)
awk -v t0="$t0" -v tb="$tb" -v ta="$ta" -v saves="$saves" -v steps="$steps" 'BEGIN {
  sync = (tb - t0) / saves; async = (ta - t0) / saves
  # An if, not a ?: among printf arguments, whose ">" awk would take for a redirection.
  if (sync > 0)
    printf "per save: blocking %.3f s, background %.3f s (%.1f%% of blocking; target <= 15%%)\n",
           sync, async, 100 * async / sync
  else
    printf "per save: blocking %.3f s, background %.3f s (no share: the blocking saves cost " \
           "nothing beside the spread of the turns; run more turns on a quieter machine)\n", sync, async
  printf "mean step: %.3f s without saves, %.3f s with background saves (%+.1f%%; target within 10%%)\n",
         t0 / steps, ta / steps, 100 * (ta - t0) / t0
}'
